-- result bool: ran more
CALL clean_v1(:table_name, :older_than, :batch, :dry_run, :interval, :now)
