"""The P4Runtime controller: static table entries from the fabric model, pushed to every switch."""
