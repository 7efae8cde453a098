"""A local stack on one machine: embedded services (or the ones named), the workers, the demo."""
