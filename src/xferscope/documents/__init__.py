"""Result documents: reading them back, writing files atomically, and the JSON, CSV and
Prometheus exporters."""
