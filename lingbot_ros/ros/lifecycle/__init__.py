"""Configure's heavy part on a background thread, stream snapshots (the save job, the
handlers for ~/save_session, ~/load_session, resume and save on shutdown) and the file policy
(files.root)."""
