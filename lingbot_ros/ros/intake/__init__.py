"""What comes in: the image subscription and its CDR reader, conversion, the bounded queue, the
worker thread that runs each frame, and the scale source's inputs (depth and odometry messages)."""
