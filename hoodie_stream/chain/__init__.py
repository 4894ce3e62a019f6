"""What the stages of the write chain share: the columns records carry between stages, record kinds, the key-group
function, task tags and the workers' memory settings. Every stage (key-by, bucket assign, write function) and the
index state may import this package; it imports only the format core."""
