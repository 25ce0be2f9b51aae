CALL dispatch_tis_v1(:executor, :limit, :resend_after, :now)
