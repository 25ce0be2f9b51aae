-- MySQL procedures have no parameter defaults: 2 is queue_tis_v3's p_page_factor default.
CALL queue_tis_v3(:max_tis, :job_id, :now, 2)
