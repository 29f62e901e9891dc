"""Package data: the template of a new target plugin package (``tilecraft new-target``),
installed as ``tilecraft.scaffold_templates``."""
