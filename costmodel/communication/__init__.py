"""Communication time: collectives at their links' bandwidth, the links of a choice, the device mesh, context-parallel
and data-parallel terms, and links shared by concurrent traffic."""
