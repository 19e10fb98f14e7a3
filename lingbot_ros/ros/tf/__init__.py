"""REP-105 frame algebra and a TF buffer without tf2_ros (numpy over geometry/): the tree, its
listener, the frame chain and the robot's frames."""
