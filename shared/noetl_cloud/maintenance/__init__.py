"""The maintenance jobs every deployment runs on a schedule (:mod:`.schedule`) and the local stack's
scheduler that runs them (:mod:`.scheduler`)."""
