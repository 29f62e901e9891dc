"""The committed JSON Schema files (schemas/) match the models; regenerate them with
`tilecraft schemas export schemas/` after changing a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from tilecraft.errors import TargetError
from tilecraft.target import schemas
from tilecraft.target.schemas import (
    EXPORT_COMMAND,
    export_schemas,
    register_schema,
    schema_model,
    schema_names,
    schema_text,
)

COMMITTED = Path(__file__).resolve().parent.parent / "schemas"


@pytest.mark.parametrize("name", schema_names())
def test_committed_schema_is_up_to_date(name: str) -> None:
    path = COMMITTED / name
    assert path.is_file(), f"{path} is missing; run `{EXPORT_COMMAND}`"
    assert path.read_text(encoding="utf-8") == schema_text(name), (
        f"{path} is stale: the model changed; run `{EXPORT_COMMAND}` and commit the result")


def test_no_stray_schema_files() -> None:
    stray = sorted({p.name for p in COMMITTED.glob("*.json")} - set(schema_names()))
    assert not stray, f"{stray} in schemas/ are exported by no model; delete them"


def test_schema_describes_the_spec_fields() -> None:
    schema = json.loads(schema_text("target_spec.json"))
    assert schema["additionalProperties"] is False
    assert {"name", "api_version", "memory", "compute", "primitives", "loop_kinds",
            "evaluation"} <= set(schema["required"])
    level = schema["$defs"]["MemoryLevel"]["properties"]
    assert "size_bytes" in level and "bandwidth_bytes_per_cycle" in level
    assert schema["$defs"]["SchedulePrimitive"]["enum"][0] == "split"


@pytest.mark.parametrize("kind", ["cpu", "gpu", "npu", "fpga"])
def test_template_spec_validates_against_the_schema_shape(kind: str, tmp_path: Path) -> None:
    """A light structural check without a JSON Schema validator: every top-level key of the
    scaffold's spec, of each kind, is a property of the schema."""
    from tilecraft.scaffold import render_target_package

    render_target_package("t", tmp_path, kind)
    keys = set(yaml.safe_load((tmp_path / "t" / "tilecraft_t" / "spec.yaml").read_text()))
    assert keys <= set(json.loads(schema_text("target_spec.json"))["properties"])


def test_export_and_register_extension_point(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    class TuningRecord(BaseModel):
        kernel: str
        seconds: float

    monkeypatch.setattr(schemas, "_SCHEMAS", dict(schemas._SCHEMAS))
    register_schema("tuning_record.json", TuningRecord)
    assert "tuning_record.json" in schema_names()
    assert schema_model("tuning_record.json") is TuningRecord
    written = export_schemas(tmp_path / "out")
    assert sorted(p.name for p in written) == schema_names()
    record = json.loads((tmp_path / "out" / "tuning_record.json").read_text())
    assert set(record["properties"]) == {"kernel", "seconds"}
    with pytest.raises(TargetError, match="must be a plain name ending in .json"):
        register_schema("records/x.json", TuningRecord)
    with pytest.raises(TargetError, match="no schema 'nope.json'; the schemas are"):
        schema_text("nope.json")
