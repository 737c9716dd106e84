"""Documents in upstream's CR shapes: the kind registry, JSON-Schema validation and YAML I/O."""
