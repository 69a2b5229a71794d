"""`xferscope sweep`: options, the measuring loop and its result records."""
