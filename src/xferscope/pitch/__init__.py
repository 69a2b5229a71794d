"""`xferscope pitch`: 2D and 3D copies by width and pitch."""
