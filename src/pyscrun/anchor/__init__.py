"""The anchor: one daemon per container on the submit host."""
