sessionlog: error: I/O error on /tmp/attack/rostore/LOCK: Read-only file system (os error 30)
