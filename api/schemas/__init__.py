"""Wire schemas (pydantic request models) and renderers (entity -> wire dict), per family."""
