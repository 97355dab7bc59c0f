"""One task of a local TensorFlow cluster, started by `core.runproc.cluster.LocalCluster` with TF_CONFIG set.

Roles: `mwms-worker` (a custom training loop under MultiWorkerMirroredStrategy), `server` (a parameter
server or a parameter-server worker: a tf.distribute.Server), `ps-coordinator` (a custom loop through
ClusterCoordinator). Results are printed as one line prefixed with RESULT_PREFIX.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import time
from typing import Any

from tf_device_panel.core.config import ConfigError, DeviceConfig, ProfileError, load_profile
from tf_device_panel.core.config.plan import StepError
from tf_device_panel.core.processes import die_with_parent
from tf_device_panel.core.runproc.cluster import RESULT_PREFIX, TaskDevices, TaskResult
from tf_device_panel.core.runproc.runtime_main import apply_config


def report(result: TaskResult) -> None:
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


def devices(tf: Any, args: argparse.Namespace) -> TaskDevices:
    """What the task's configuration did, and its logical devices (ask only once the strategy exists)."""
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    own = (f"/job:{task['type']}/replica:0/task:{task['index']}/", "/job:localhost/")
    every = [d.name for d in tf.config.list_logical_devices()]
    return {"applied": args.applied, "logical": [name for name in every if name.startswith(own)], "cluster": every}


def mwms_worker(tf: Any, args: argparse.Namespace) -> None:
    config = json.loads(os.environ["TF_CONFIG"])
    workers = len(config["cluster"]["worker"])
    started = time.monotonic()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    connected = time.monotonic()
    replicas = strategy.num_replicas_in_sync
    global_batch_size = args.batch_per_replica * replicas

    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1)])
        optimizer = tf.keras.optimizers.SGD(args.learning_rate)

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(args.steps * global_batch_size)
    dataset = dataset.batch(global_batch_size).with_options(options)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)
    loss_object = tf.keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")

    def train_step(inputs: Any) -> Any:
        features, labels = inputs
        with tf.GradientTape() as tape:
            per_example = loss_object(labels, model(features, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def distributed_step(inputs: Any) -> Any:
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(train_step, args=(inputs,)), axis=None)

    losses = []
    for step, inputs in enumerate(dist_dataset, 1):
        losses.append(float(distributed_step(inputs)))
        print(f"step {step}: loss {losses[-1]:.6f}", flush=True)
    finished = time.monotonic()
    report({"workers": workers, "replicas_in_sync": replicas, "global_batch_size": global_batch_size,
            "losses": losses, "connect_s": connected - started, "train_s": finished - connected,
            "task": config["task"], "devices": devices(tf, args)})


def server(tf: Any, args: argparse.Namespace) -> None:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    workers = len(resolver.cluster_spec().as_dict().get("worker", []))
    # A server takes its devices from this ConfigProto, not from tf.config: start from the one tf.config
    # built (logical CPUs, virtual GPUs, memory growth, visible GPUs, placement flags).
    from tensorflow.python.eager import context

    config = context.context().config
    # TF's PS tutorial: on small machines a worker needs more inter-op threads than workers, or it hangs.
    config.inter_op_parallelism_threads = workers + 1
    tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
                         protocol=resolver.rpc_layer or "grpc", config=config, start=True).join()


def ps_coordinator(tf: Any, args: argparse.Namespace) -> None:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    started = time.monotonic()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    connected = time.monotonic()
    with strategy.scope():
        weight = tf.Variable(0.5, name="weight")
        bias = tf.Variable(0.0, name="bias")
        # Steps run asynchronously on the workers, in any order: number them as they execute.
        executed = tf.Variable(0, dtype=tf.int64, name="executed_steps")

    def dataset_fn() -> Any:
        return tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat().batch(args.batch_per_replica)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    loss_object = tf.keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")
    learning_rate = args.learning_rate

    @tf.function
    def step_fn(iterator: Any) -> Any:
        def replica_fn(batch: Any) -> Any:
            features, labels = batch
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_object(labels, features * weight + bias))
            grad_w, grad_b = tape.gradient(loss, [weight, bias])
            weight.assign_sub(learning_rate * grad_w)
            bias.assign_sub(learning_rate * grad_b)
            return loss, executed.assign_add(1)

        return strategy.run(replica_fn, args=(next(iterator),))

    scheduled = [coordinator.schedule(step_fn, args=(iterator,)) for _ in range(args.steps)]
    coordinator.join()
    finished = time.monotonic()
    fetched = [remote.fetch() for remote in scheduled]
    losses = [float(loss) for loss, _ in sorted(fetched, key=lambda pair: int(pair[1]))]
    for step, loss in enumerate(losses, 1):
        print(f"step {step}: loss {loss:.6f}", flush=True)
    report({"variables": {v.name: v.device for v in (weight, bias, executed)},
            "values": {v.name: float(v.numpy()) for v in (weight, bias)},
            "losses": losses, "steps": len(losses), "connect_s": connected - started,
            "train_s": finished - connected, "steps_per_s": len(losses) / max(finished - connected, 1e-9),
            "workers": len(resolver.cluster_spec().as_dict().get("worker", [])), "devices": devices(tf, args)})


ROLES = {"mwms-worker": mwms_worker, "server": server, "ps-coordinator": ps_coordinator}


def device_config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> DeviceConfig:
    """The task's device configuration: --device-config JSON, or a --profile file; --log-placement on top."""
    try:
        if args.device_config is not None:
            config = DeviceConfig.from_json(json.loads(args.device_config))
        elif args.profile is not None:
            config = load_profile(args.profile)
        else:
            config = DeviceConfig(log_placement=False)
    except json.JSONDecodeError as exc:
        parser.error(f"--device-config is not JSON: {exc}")
    except (ConfigError, ProfileError) as exc:
        parser.error(f"invalid device configuration: {exc}")
    return config.with_changes(log_placement=True) if args.log_placement else config


def main(argv: list[str] | None = None) -> int:
    # A crash in TensorFlow's C++ or gRPC (SIGSEGV, SIGABRT, SIGBUS) then leaves on stderr which thread crashed
    # and what Python was doing, for the job to report (with no Python frame: it was in native code).
    faulthandler.enable(all_threads=True)
    die_with_parent()
    parser = argparse.ArgumentParser(prog="python -m tf_device_panel.core.runproc.cluster_task")
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-per-replica", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--log-placement", action="store_true")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--device-config", metavar="JSON", help="device configuration, as in a profile")
    source.add_argument("--profile", metavar="FILE", help="device configuration profile (JSON)")
    args = parser.parse_args(argv)
    if "TF_CONFIG" not in os.environ:
        parser.error("TF_CONFIG is not set; `tf-device-panel cluster-config` prints it for each task")
    config = device_config(args, parser)
    import tensorflow as tf

    try:
        applied = apply_config(tf, config)  # before TensorFlow initializes, as in the runtime
    except StepError as exc:
        print(f"device configuration failed at {exc}", file=sys.stderr, flush=True)
        return 2
    args.applied = applied  # listing devices now would initialize TF before the strategy configures it
    ROLES[args.role](tf, args)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # TensorFlow's teardown can hang with gRPC servers still connected
