-- delete(?1 operation, ?2 key)
DELETE FROM {records} WHERE operation = ?1 AND key = ?2
