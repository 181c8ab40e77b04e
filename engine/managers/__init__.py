"""Use cases, one manager per entity family (as OpenZiti's ``controller/model/*_manager.go``)."""
