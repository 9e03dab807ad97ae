"""Memory per GPU: the tensor ledger's model and activation terms, optimizer/parameter offload, and the runtime memory
outside the ledger, and the checkpoint bytes a replan reshards (reshard.py, issue 43)."""
