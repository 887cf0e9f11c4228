"""Starting a run (rl_start_training): the session's environment and config checked, run.yaml
written, the registry's row made, and the run's supervisor launched (or its cluster job
submitted). Returns at once; the supervisor brings the processes up in the background.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from pathlib import Path

from mcp_rl import processes
from mcp_rl.atomic import write_text_atomic
from mcp_rl.config import RunOptions, Session, build_run_config, resolve_run_options
from mcp_rl.config.environment_service import EnvironmentService
from mcp_rl.errors import LaunchError, UserError
from mcp_rl.runconfig import RunConfig
from mcp_rl.rundir import LOGS_DIR, RUN_FILE
from mcp_rl.settings import Settings
from mcp_rl.supervisor.launchers import (
    JOB_STOP_MARGIN_S,
    SUBMISSION_FILE,
    ClusterLauncher,
    Resources,
    Submission,
    launcher_for,
    supervisor_python,
)
from mcp_rl.supervisor.models import RunStarted, log_uri
from mcp_rl.supervisor.registry import Registry, RunRecord, registry_for
from mcp_rl.supervisor.states import LOG_NAMES, PROCESS_NAMES, ProcState, RunState, run_marker
from mcp_rl.supervisor.supervisor import Policy


def _with_start_checkpoint(settings: Settings, session: Session, config: RunConfig) -> RunConfig:
    """The run bound to the earlier checkpoint its `start_from` option names (refused in words when
    that run trained another model or rank, or has no resumable checkpoint there)."""
    options, _ = resolve_run_options(settings, session.run_options, session.environment)
    if not options.start_from:
        return config
    from mcp_rl.weights.checkpoints import resolve_init  # only runs that start from a checkpoint need it

    run_id, _, step = options.start_from.partition("@")
    t = config.trainer
    path = resolve_init(settings, run_id, int(step) if step else None, t.base_model, t.lora_rank)
    return config.model_copy(update={"trainer": t.model_copy(update={"init_from": path})})


def start_run(settings: Settings, environments: EnvironmentService | None = None) -> RunStarted:
    """Validate the session's environment and config, write run.yaml, launch a supervisor.

    Returns at once; the supervisor brings the processes up in the background.
    """
    environments = environments or EnvironmentService(settings)
    session, spec = environments.selected()  # raises if nothing is selected or the file is gone
    registry = registry_for(settings)
    run_id = _new_run_id(registry)
    config = build_run_config(settings, session, spec, run_id)
    config = _with_start_checkpoint(settings, session, config)
    _validate(config, settings)
    options, _ = resolve_run_options(settings, session.run_options, session.environment)
    run_dir = config.paths.run_dir
    # A cluster job is checked with its scheduler before anything is written.
    cluster = _prepare_job(settings, options, run_id, run_dir)

    config.paths.logs_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / RUN_FILE
    config.dump(config_path)

    now = time.time()
    wandb = config.trainer.wandb
    registry.create_run(
        RunRecord(
            run_id=run_id,
            environment=config.environment.name,
            backend=config.trainer.backend,
            state=RunState.STARTING,
            created_at=now,
            updated_at=now,
            run_dir=str(run_dir),
            config_path=str(config_path),
            wandb_project=wandb.project if wandb.enabled else None,
            wandb_run_name=_wandb_run_name(config),
            launcher=options.launcher,
            job_address=cluster[0].address if cluster else None,
        ),
        cause="rl_start_training",
    )
    for name in PROCESS_NAMES:
        registry.set_process(run_id, name, state=ProcState.PENDING, log_path=str(config.paths.logs_dir / f"{name}.log"))
    submission = None
    if cluster is None:
        _launch_supervisor(settings, registry, run_id, run_dir)
    else:
        submission = _submit_job(settings, registry, run_id, run_dir, *cluster)

    logs = {name: log_uri(run_id, name) for name in LOG_NAMES}
    return RunStarted(
        run_id=run_id,
        status=RunState.STARTING,
        environment=config.environment.name,
        backend=config.trainer.backend,
        base_model=config.trainer.base_model,
        num_steps=config.trainer.num_steps,
        config_path=str(config_path),
        config=config.env,
        wandb_project=wandb.project if wandb.enabled else None,
        wandb_run_name=_wandb_run_name(config),
        logs=logs,
        status_resource=f"rl://runs/{run_id}",
        launcher=options.launcher,
        job_id=submission.job_id if submission else None,
        submission=submission,
        message=(
            f"Run {run_id} is starting in the background ({config.trainer.backend} backend, "
            f"{config.trainer.num_steps} steps"
            + (f", {submission.launcher} job {submission.job_id}" if submission else "")
            + "): Atropos API, then trainer, then environment. "
            f"It keeps going if this client disconnects. Poll rl_check_status('{run_id}'); "
            f"stop with rl_stop_training('{run_id}')."
        ),
    )


def _new_run_id(registry: Registry) -> str:
    while True:
        run_id = uuid.uuid4().hex[:8]
        if registry.get_run(run_id) is None:
            return run_id


def _wandb_run_name(config: RunConfig) -> str | None:
    name = config.env.get("wandb_name")
    return str(name) if name else None


def _validate(config: RunConfig, settings: Settings) -> None:
    env_file = config.environment.file_path
    if not Path(env_file).is_file():
        raise UserError(
            f"The environment file {env_file} no longer exists. Call rl_list_environments and rl_select_environment again."
        )
    trainer = config.trainer
    if trainer.batch_size % trainer.group_size != 0:
        raise UserError(
            f"batch_size ({trainer.batch_size}) must be a multiple of group_size ({trainer.group_size}); "
            "fix it with rl_edit_config."
        )
    # run.yaml is read by three processes and kept on disk: a secret must never be in it.
    text = config.model_dump_json()
    for secret in (settings.tinker_api_key, settings.wandb_api_key, settings.openrouter_api_key):
        if secret is not None and secret.get_secret_value() and secret.get_secret_value() in text:
            raise UserError("The run config contains an API key; keys are taken from the environment only.")


def _prepare_job(
    settings: Settings, options: RunOptions, run_id: str, run_dir: Path
) -> tuple[ClusterLauncher, Submission] | None:
    """For a cluster launcher: its checks (UserError naming the option) and the exact submission."""
    if options.launcher == "local":
        for name in ("gpus", "partition", "account", "time_limit_minutes", "ray_address", "cluster_venv"):
            if getattr(options, name):
                raise UserError(
                    f"Run option {name} is for cluster jobs but launcher is 'local'. Set launcher to slurm or ray, "
                    f"or clear it with rl_edit_config('{name}', null)."
                )
        return None
    resources = Resources(
        gpus=options.gpus,
        partition=options.partition,
        account=options.account,
        time_limit_minutes=options.time_limit_minutes,
        ray_address=options.ray_address,
        cluster_venv=options.cluster_venv,
    )
    python = supervisor_python(resources)
    if not Path(python).is_file():
        raise UserError(
            f"The job would run {python}, which does not exist here: cluster jobs need mcp-rl at the same path on "
            "the cluster's shared filesystem; set cluster_venv to the venv that has it."
        )
    launcher = launcher_for(options.launcher, options.ray_address)
    launcher.check(resources)
    policy = Policy.from_settings(settings)
    submission = launcher.prepare(run_id, run_dir, resources, grace_s=policy.total_stop_s() + JOB_STOP_MARGIN_S)
    launcher.dry_run(submission, settings.child_env())
    return launcher, submission


def _submit_job(
    settings: Settings,
    registry: Registry,
    run_id: str,
    run_dir: Path,
    launcher: ClusterLauncher,
    submission: Submission,
) -> Submission:
    try:
        job_id = launcher.submit(submission, run_dir, settings.child_env())
    except LaunchError as exc:
        registry.transition(run_id, RunState.FAILED, f"the {launcher.name} job could not be submitted: {exc}")
        raise
    registry.update_run(run_id, job_id=job_id)
    registry.record_event(run_id, "run", "submitted", f"{launcher.name} job {job_id}")
    # Written down in the run folder: a registry rebuilt from the folders finds the job again.
    submission = submission.model_copy(update={"job_id": job_id, "address": launcher.address})
    write_text_atomic(run_dir / SUBMISSION_FILE, submission.model_dump_json(indent=2))
    return submission


def _launch_supervisor(settings: Settings, registry: Registry, run_id: str, run_dir: Path) -> None:
    argv = [sys.executable, "-m", "mcp_rl.supervisor", "--run-dir", str(run_dir)]
    try:
        popen = processes.spawn(
            argv,
            run_dir / LOGS_DIR / "supervisor.log",
            settings.child_env(),
            cwd=run_dir,
            marker=run_marker(str(run_dir)),
        )
    except OSError as exc:
        registry.transition(run_id, RunState.FAILED, f"could not start the run supervisor: {exc}")
        raise LaunchError(f"could not start the run supervisor: {exc}") from exc
    identity = processes.identify(popen.pid)
    registry.update_run(
        run_id, supervisor_pid=popen.pid, supervisor_create_time=identity.create_time if identity else None
    )
    # The supervisor lives on after this server; reap it if it ends first, so no zombie is left.
    threading.Thread(target=popen.wait, name=f"reap-supervisor-{run_id}", daemon=True).start()
