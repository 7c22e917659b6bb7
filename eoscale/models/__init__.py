"""Models: timm backbones with segmentation and tile-classification heads.

`build_model` is the entry point; `shardable_blocks` names what FSDP2 wraps block by block.
"""

from eoscale.models.backbone import (
    Backbone,
    FeatureBackbone,
    VitBackbone,
    WeightsReport,
    check_model_name,
    create_backbone,
    read_state_dict,
)
from eoscale.models.factory import SegmentationModel, TileClassifier, build_model, shardable_blocks
from eoscale.models.heads import ClassificationHead, FPNDecoder, SimpleFeaturePyramid

__all__ = [
    "Backbone",
    "ClassificationHead",
    "FPNDecoder",
    "FeatureBackbone",
    "SegmentationModel",
    "SimpleFeaturePyramid",
    "TileClassifier",
    "VitBackbone",
    "WeightsReport",
    "build_model",
    "check_model_name",
    "create_backbone",
    "read_state_dict",
    "shardable_blocks",
]
