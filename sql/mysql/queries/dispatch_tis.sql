CALL dispatch_tis_v2(:executor, :limit, :resend_after, :now)
