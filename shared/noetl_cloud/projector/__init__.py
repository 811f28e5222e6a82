"""The projector role: the push endpoint of ``noetl-events`` folding events into live projections."""
