SELECT * FROM clean_v1(CAST(:table_name AS text), :older_than, :batch, :dry_run, :interval, :now)
