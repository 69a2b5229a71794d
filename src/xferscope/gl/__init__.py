"""`xferscope gl`: seed 000's OpenGL download (upload) and readback explorer, headless through
EGL. states.py parses the states and plans the scenarios (the cross product of every list);
measure.py verifies and times each one, with the paper's time limiter and asynchronous mode, and
holds the result record and its JSON and CSV forms."""
