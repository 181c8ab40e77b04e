"""The engine's ``SchemaChecker`` port on the ``jsonschema`` package."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft7Validator
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import validator_for

from engine.ports import SchemaViolation


class JsonSchemaChecker:
    """Draft-07 unless ``$schema`` names another draft.

    Formats are annotations only: OpenZiti's intercept addresses use ``idn-hostname`` for values
    (CIDRs, wildcards) that a strict format check would refuse.
    """

    def schema_error(self, schema: dict[str, Any]) -> str | None:
        cls = validator_for(schema, default=Draft7Validator)
        try:
            cls.check_schema(schema)
        except SchemaError as ex:
            return str(ex.message)
        return None

    def first_violation(self, schema: dict[str, Any], data: Any) -> SchemaViolation | None:
        cls = validator_for(schema, default=Draft7Validator)
        error = best_match(cls(schema).iter_errors(data))
        if error is None:
            return None
        return SchemaViolation(
            path=tuple(error.absolute_path),
            keyword=str(error.validator),
            instance=error.instance,
            expected=error.validator_value,
            schema=error.schema,
            message=str(error.message),
        )
