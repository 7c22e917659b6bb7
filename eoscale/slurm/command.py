"""`eoscale slurm render | submit | list`: job scripts from a cluster profile and a template.

    eoscale slurm render juwels-booster fit --account PROJECT --nodes 4 --config configs/vit_s16_seg.yaml
    eoscale slurm submit local run --set command='eoscale info runs/tiles.zarr'      # prints the job id
    eoscale slurm submit pipelines/quickstart.yaml --profile local                    # one job per step
    eoscale slurm list                                                                # profiles, templates, keys
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eoscale.errors import InputError
from eoscale.paths import AppendPaths, Paths


def _job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="assignments",
                        help="a job setting (repeatable); 'eoscale slurm list' shows the keys of each template")
    parser.add_argument("--config", action=AppendPaths, metavar="FILE",
                        help="a LightningCLI config for fit/pretrain (repeatable, in order)")
    parser.add_argument("--account", help="compute project to charge")
    parser.add_argument("--partition", help="partition (default: the profile's)")
    parser.add_argument("--nodes", help="nodes (fit, pretrain, run)")
    parser.add_argument("--time", help="time limit HH:MM:SS or D-HH:MM:SS (default: the profile's)")
    parser.add_argument("--job-name", help="job name (default: eoscale-TEMPLATE)")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Render or submit Slurm job scripts: a cluster profile (slurm/profiles: juwels-booster, jureca-dc, local, "
        "or a YAML path) and a template (slurm/*.sbatch.j2: fit, pretrain, predict, ingest, run, or a path). "
        "Every value is validated and shell-quoted."
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    render = sub.add_parser("render", help="print the job script")
    render.add_argument("profile", action=Paths, metavar="PROFILE")
    render.add_argument("template", action=Paths, metavar="TEMPLATE")
    _job_options(render)
    render.add_argument("--output", "-o", metavar="FILE", help="write the script to FILE instead of printing it")
    submit = sub.add_parser("submit", help="submit the job (sbatch --parsable) and print its id; "
                                           "or submit a pipeline YAML as jobs chained with afterok")
    submit.add_argument("profile", action=Paths, metavar="PROFILE|PIPELINE.yaml")
    submit.add_argument("template", action=Paths, metavar="TEMPLATE", nargs="?")
    _job_options(submit)
    submit.add_argument("--dependency", metavar="SPEC",
                        help="sbatch --dependency, e.g. afterok:1234 (the job starts when 1234 succeeded)")
    submit.add_argument("--profile", dest="pipeline_profile", action=Paths, metavar="PROFILE",
                        help="for a pipeline: the profile of its jobs (default: the pipeline's own)")
    sub.add_parser("list", help="profiles, templates and the settings each template takes")


def values_from(args: argparse.Namespace) -> dict:
    from eoscale.cluster.settings import parse_assignments

    values = parse_assignments(args.assignments)
    for key in ("account", "partition", "nodes", "time", "job_name"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    if args.config:
        values["config"] = args.config
    return values


def run(args: argparse.Namespace) -> int:
    from eoscale.cluster.profiles import load_profile, profile_names
    from eoscale.cluster.settings import KEYS
    from eoscale.slurm.render import render_job, template_names
    from eoscale.slurm.submit import submit_job

    if args.action == "list":
        print("profiles:")
        for name in profile_names():
            print(f"  {name:16} {load_profile(name).description}")
        print("templates (and the settings each takes; --set KEY=VALUE):")
        for name in template_names():
            keys = [k for k, spec in KEYS.items() if name in spec.templates]
            print(f"  {name:16} {' '.join(keys)}")
        print("settings:")
        for key, spec in KEYS.items():
            print(f"  {key:18} {spec.help}")
        return 0

    if args.action == "submit" and args.template is None:
        if not args.profile.endswith((".yaml", ".yml")):
            raise InputError(f"submit takes PROFILE TEMPLATE, or a pipeline YAML file; got only {args.profile!r}")
        from eoscale.slurm.pipeline import load_pipeline, submit_pipeline

        pipeline = load_pipeline(args.profile)
        jobs = submit_pipeline(pipeline, profile=args.pipeline_profile, extra=values_from(args))
        for step, job_id in jobs.items():
            print(f"{job_id}\t{step}")
        return 0

    job = render_job(args.profile, args.template, values_from(args))
    if args.action == "render":
        if args.output:
            Path(args.output).write_text(job.script)
            print(f"wrote {args.output}", file=sys.stderr)
        else:
            sys.stdout.write(job.script)
        return 0
    print(submit_job(job, dependency=args.dependency))
    return 0
