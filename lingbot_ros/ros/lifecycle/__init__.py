"""Configure's heavy part on a background thread, the snapshot handlers (~/save_session,
~/load_session, resume, save on shutdown) and the file policy (files.root), and reset, load and
save as one procedure each."""
