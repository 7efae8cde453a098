"""Device-specific fast paths, each beside the torch reference it must match."""
