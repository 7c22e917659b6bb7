"""`eoscale assess`: how accurate a map is and how much area each class covers, with 95 % confidence intervals
(Olofsson et al. 2014), from a labelled sample or a reference raster.

    eoscale sample maps/T32UNE_landcover.tif --n 600 --allocation min-per-class 50 --output samples/T32UNE
    # … fill the 'reference' column of samples/T32UNE.csv with class codes …
    eoscale assess maps/T32UNE_landcover.tif --reference samples/T32UNE.csv --output assessment/T32UNE
    eoscale assess maps/T32UNE_landcover.tif --reference labels/T32UNE_labels.tif      # a census raster

Writes assessment.csv/.json/.md and confusion.png (`eoscale.maps.report`) and logs them to MLflow, on the
map's predict run where its STAC Item names it (`eoscale.maps.tracking`).
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("Strata are the map's classes, weighted by their mapped areas. A sample's CSV x, y are read "
                     "in the CRS its _design.json records (else its lon, lat as WGS84); a GeoPackage carries its "
                     "CRS. A reference raster is warped onto the map's grid (nearest neighbour).")
    parser.add_argument("map", metavar="MAP", help="the land-cover map (a COG from 'eoscale predict')")
    parser.add_argument("--reference", required=True, metavar="REF",
                        help="a labelled sample (.csv or .gpkg from 'eoscale sample', 'reference' column filled "
                             "with class codes) or a reference raster of class codes (any CRS and resolution)")
    parser.add_argument("--design", metavar="JSON", help="the sample's design file (default: <sample>_design.json "
                                                         "beside it, if there)")
    parser.add_argument("--output", metavar="DIR", help="output folder (default: <map without .tif>_assessment "
                                                        "beside the map)")
    parser.add_argument("--classes", metavar="CSV", help="class table (code,name,color) for a map without "
                                                         "the EOSCALE_CLASSES tag")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else the map's "
                                               "predict run's, else sqlite:///DIR/mlflow.db)")
    parser.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing assessment in DIR")


def run(args: argparse.Namespace) -> int:
    from eoscale.maps.classmap import open_map
    from eoscale.maps.estimate import stratified
    from eoscale.maps.reference import read_reference
    from eoscale.maps.report import build_report, check_folder, write_report

    cmap = open_map(args.map, classes=args.classes)
    output = Path(args.output) if args.output else cmap.path.with_name(cmap.path.stem + "_assessment")
    check_folder(output, overwrite=args.overwrite)  # before the work
    reference = read_reference(cmap, args.reference, design=args.design)
    estimates = stratified(reference.counts, reference.areas.weights, float(reference.areas.hectares.sum()),
                           census=reference.census)
    report = build_report(map_path=cmap.path, reference=reference, table=cmap.table, estimates=estimates)
    files = write_report(report, output, overwrite=args.overwrite)
    print_summary(report, output)
    if not args.no_tracking:
        from eoscale.maps.tracking import log_assessment

        with warnings.catch_warnings():
            warnings.simplefilter("default")  # a tracking failure is said once, as a warning
            logged = log_assessment(report, files, map_path=cmap.path, output=output,
                                    tracking_uri_given=args.tracking_uri)
        if logged:
            print(f"MLflow run {logged[0]} ({logged[1]})")
    return 0


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
