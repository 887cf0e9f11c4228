"""Did it learn? Held-out evaluation of a base model and a trained one on the same items, and the
paired statistics that compare them (stats)."""
