-- `engine events send KEY [--payload JSON]` (send_event_v2): how many TIs resumed.
SELECT send_event_v2(:key, CAST(:payload AS jsonb), :now, :boost) AS resumed
