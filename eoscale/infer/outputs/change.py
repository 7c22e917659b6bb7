"""The "change" output writer: a change model's map of two dates (`eoscale.models.change`).

    <scene>_change.tif       COG, change class CODES of the class table the model was trained on (e.g. `eoscale synth
                             --change`'s change_classes.csv: no change, forest loss, new built-up, ...), colours and
                             names embedded, nodata where either date has none
    <scene>_confidence.tif   (--confidence) the mapped change class's probability, percent
    <scene>_areas.csv/.json  pixels, hectares and percent of each change class (map areas: `eoscale sample` and
                             `eoscale assess` turn them into error-adjusted areas with confidence intervals)
    <scene>_quicklook.png, <scene>_item.json

A change map is a class map whose classes are changes, so everything but its file name and description is the class
writer's; `<scene>` is the first date's scene.
"""

from __future__ import annotations

from pathlib import Path

from eoscale.infer.outputs.base import register_writer
from eoscale.infer.outputs.classes import ClassWriter, SceneOutputs


class ChangeWriter(ClassWriter):
    """Change maps: the class writer's files, the map named `<scene>_change.tif`."""

    kind = "change"
    map_description = "change class code"
    map_asset = "change"
    summary_column = "largest change classes"
    files_note = "change maps, quick-looks and area tables in {output}/ (<scene>_change.tif, _quicklook.png, _areas.csv)"

    def scene_files(self, folder: Path, scene_id: str) -> SceneOutputs:
        files = SceneOutputs.for_scene(folder, scene_id, confidence=self.confidence)
        return SceneOutputs(Path(folder) / f"{scene_id}_change.tif", files.confidence, files.quicklook, files.areas_csv,
                            files.areas_json, files.item)


register_writer(ChangeWriter.kind, ChangeWriter)
