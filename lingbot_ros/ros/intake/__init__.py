"""What comes in and the stream it feeds: the image subscription and its CDR reader,
conversion, the bounded queue, the worker thread that runs each frame, reset, load and save
between two frames (``StreamControl``, one procedure each), and the scale source's inputs
(depth and odometry messages)."""
