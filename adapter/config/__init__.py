"""Configuration: pydantic models of the VA spec, the WVA ConfigMaps and the engine settings.

This package is the only reader of YAML text; it turns outside input into frozen, validated values whose
error messages name the source, the key, the value and the allowed range.
"""
