UPDATE dag SET is_paused = :paused WHERE dag_id = :dag_id AND is_active RETURNING dag_id
