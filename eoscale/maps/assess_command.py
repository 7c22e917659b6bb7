"""`eoscale assess`: how accurate a map is and how much area each class covers, with 95 % confidence intervals
(Olofsson et al. 2014), from a labelled sample or a reference raster.

    eoscale sample maps/T32UNE_landcover.tif --n 600 --allocation min-per-class 50 --output samples/T32UNE
    # … fill the 'reference' column of samples/T32UNE.csv with class codes …
    eoscale assess maps/T32UNE_landcover.tif --reference samples/T32UNE.csv --output assessment/T32UNE
    eoscale assess maps/T32UNE_landcover.tif --reference labels/T32UNE_labels.tif      # a census raster
    eoscale assess maps/T32UNE_values.tif --reference plots.csv          # a value map: points x,y,value
    eoscale assess maps/T32UNE_values.tif --reference lidar_chm.tif      # … or a raster of values

A value map (`eoscale predict` with a regression model; tag EOSCALE_TARGET=values) gets RMSE, MAE, bias and R²
with 95 % intervals and a scatter plot (`eoscale.maps.valuemap`, `agreement`, `value_report`).

Writes assessment.csv/.json/.md and confusion.png (`eoscale.maps.report`) and logs them to MLflow, on the
map's predict run where its STAC Item names it (`eoscale.maps.tracking`).
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from eoscale.errors import InputError
from eoscale.paths import Paths


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("Strata are the map's classes, weighted by their mapped areas. A sample's CSV x, y are read "
                     "in the CRS its _design.json records (else its lon, lat as WGS84); a GeoPackage carries its "
                     "CRS. A reference raster is warped onto the map's grid (nearest neighbour).")
    parser.add_argument("map", action=Paths, metavar="MAP", help="the land-cover map (a COG from 'eoscale predict')")
    parser.add_argument("--reference", required=True, action=Paths, metavar="REF",
                        help="a labelled sample (.csv or .gpkg from 'eoscale sample', 'reference' column filled "
                             "with class codes) or a reference raster of class codes (any CRS and resolution)")
    parser.add_argument("--design", action=Paths, metavar="JSON", help="the sample's design file (default: <sample>_design.json "
                                                         "beside it, if there)")
    parser.add_argument("--output", metavar="DIR", help="output folder (default: <map without .tif>_assessment "
                                                        "beside the map)")
    parser.add_argument("--classes", action=Paths, metavar="CSV", help="class table (code,name,color) for a map without "
                                                         "the EOSCALE_CLASSES tag")
    parser.add_argument("--reference-crs", metavar="CRS", help="a value map's reference CSV: the CRS of its x, y "
                                                                 "columns (default: the map's)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else the map's "
                                               "predict run's, else sqlite:///DIR/mlflow.db)")
    parser.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing assessment in DIR")


def run(args: argparse.Namespace) -> int:
    from eoscale.maps.classmap import open_map
    from eoscale.maps.estimate import stratified
    from eoscale.maps.reference import check_class_reference, read_reference
    from eoscale.maps.report import build_report, check_folder, write_report
    from eoscale.maps.valuemap import map_kind

    if map_kind(args.map) == "values":
        report, files, output = assess_values(args)
        map_path = Path(args.map)
    else:
        if args.reference_crs:
            raise InputError("--reference-crs is for a value map's reference points; a class map's sample names its "
                             "CRS in its design file (or uses lon, lat)")
        cmap = open_map(args.map, classes=args.classes)
        output = Path(args.output) if args.output else cmap.path.with_name(cmap.path.stem + "_assessment")
        check_folder(output, overwrite=args.overwrite)  # before the work
        check_class_reference(args.reference)
        reference = read_reference(cmap, args.reference, design=args.design)
        estimates = stratified(reference.counts, reference.areas.weights, float(reference.areas.hectares.sum()),
                               census=reference.census)
        report = build_report(map_path=cmap.path, reference=reference, table=cmap.table, estimates=estimates)
        files = write_report(report, output, overwrite=args.overwrite)
        print_summary(report, output)
        map_path = cmap.path
    if not args.no_tracking:
        from eoscale.maps.tracking import log_assessment

        with warnings.catch_warnings():
            warnings.simplefilter("default")  # a tracking failure is said once, as a warning
            logged = log_assessment(report, files, map_path=map_path, output=output,
                                    tracking_uri_given=args.tracking_uri)
        if logged:
            print(f"MLflow run {logged[0]} ({logged[1]})")
    return 0


def assess_values(args: argparse.Namespace) -> tuple[dict, list[Path], Path]:
    """A value map against reference points or a raster of values: the statistics, the scatter plot, the files."""
    from eoscale.maps.agreement import census_agreement, sample_agreement
    from eoscale.maps.report import check_folder
    from eoscale.maps.value_report import build_value_report, print_value_summary, write_value_report
    from eoscale.maps.valuemap import open_value_map, read_value_reference

    if args.classes or args.design:
        option = "--classes" if args.classes else "--design"
        raise InputError(f"map {args.map!r} holds values, not classes: {option} is for class maps; assess it "
                         "against measured values (points x,y,value or a raster of values)")
    vmap = open_value_map(args.map)
    output = Path(args.output) if args.output else vmap.path.with_name(vmap.path.stem + "_assessment")
    check_folder(output, overwrite=args.overwrite)  # before the work
    pairs = read_value_reference(vmap, args.reference, crs=args.reference_crs)
    statistics = census_agreement(pairs.sums) if pairs.sums else sample_agreement(pairs.predicted, pairs.reference)
    report = build_value_report(map_path=vmap.path, pairs=pairs, name=vmap.name, units=vmap.units,
                                statistics=statistics)
    files = write_value_report(report, pairs, output, overwrite=args.overwrite)
    print_value_summary(report, output)
    return report, files, output


def print_summary(report: dict, output: Path) -> None:
    oa = report["overall_accuracy"]
    census = report["kind"] == "census"
    ci = "" if oa["ci95"] is None or census else f" ± {oa['ci95']:.3f}"
    kind = "census" if census else f"{report['n']} points"
    print(f"{Path(report['map']).name} against {Path(report['reference']).name} ({kind}): "
          f"overall accuracy {oa['estimate']:.3f}{ci}")
    print(f"  {'class':<28} {'user':>7} {'producer':>9} {'mapped ha':>12} {'adjusted ha':>22}")
    for c in report["classes"]:
        users = "–" if c["users_accuracy"] is None else f"{c['users_accuracy']:.3f}"
        producers = "–" if c["producers_accuracy"] is None else f"{c['producers_accuracy']:.3f}"
        adjusted = "–" if c["area_ha"] is None else (
            f"{c['area_ha']:,.1f}" + ("" if c["area_ha_ci95"] is None or census else f" ± {c['area_ha_ci95']:,.1f}"))
        print(f"  {c['name'][:28]:<28} {users:>7} {producers:>9} {c['mapped_area_ha']:>12,.1f} {adjusted:>22}")
    print(f"written to {output}/ (assessment.csv, .json, .md, confusion.png)")
