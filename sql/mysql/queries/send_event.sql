-- `engine events send KEY [--payload JSON]` (send_event_v1): how many TIs resumed.
SELECT send_event_v1(:key, :payload, :now, :boost) AS resumed
