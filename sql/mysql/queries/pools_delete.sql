DELETE FROM pool WHERE name = :name
