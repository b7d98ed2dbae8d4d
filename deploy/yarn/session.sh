#!/usr/bin/env bash
# omldm on a YARN session cluster: a recipe. NOT TESTED: there was no YARN cluster to run it
# against; every command is the documented Flink 2.0 command line, but expect to adapt it.
#
#   bash deploy/yarn/session.sh start                 # yarn-session.sh -d ...; prints the application id
#   bash deploy/yarn/session.sh submit [flink_run.py options]   # flink run -t yarn-session ...
#   bash deploy/yarn/session.sh list                  # the session's jobs
#   bash deploy/yarn/session.sh stop JOBID            # stop the job with a savepoint
#   bash deploy/yarn/session.sh resume SAVEPOINT [flink_run.py options]
#   bash deploy/yarn/session.sh kill                  # end the YARN session (yarn application -kill)
#
# Variables (errors name the missing ones):
#   FLINK_HOME        a Flink 2.0.1 distribution on this gateway machine (always)
#   HADOOP_CLASSPATH  export HADOOP_CLASSPATH=$(hadoop classpath)   (always)
#   YARN_APP_ID       application_..._...: what `start` printed (submit/list/stop/resume/kill)
#   OMLDM_BOOTSTRAP_SERVERS  Kafka host:port[,host:port] (submit/resume; or --bootstrap-servers)
#   OMLDM_HDFS        base folder for checkpoints and savepoints (default hdfs:///omldm)
#   OMLDM_DIST        what deploy/pack.sh wrote (default <repo>/dist): omldm-venv.tar.gz,
#                     omldm-src.zip, jars/. Put the venv archive on HDFS to upload it once:
#                     OMLDM_PYARCH=hdfs:///omldm/omldm-venv.tar.gz (default: $OMLDM_DIST/...)
#   CLIENT_PYTHON     the Python that runs flink_run.py here (needs omldm's requirements;
#                     default <repo>/.venv/bin/python from deploy/bootstrap.sh)
#   YARN_QUEUE, JM_MEMORY (1024m), TM_MEMORY (2048m), SLOTS (2)
#
# The venv archive's bin/python is a symlink to the interpreter pack.sh built it from: that
# interpreter must exist at the same path on every NodeManager (see deploy/pack.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
action="${1:-}"
shift || true

die() { echo "session.sh: $*" >&2; exit 1; }
usage() { sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
case "$action" in
  start|submit|resume|list|stop|kill) ;;
  *) usage ;;
esac
need() {  # need VAR "what it is": fail with a clear message when VAR is unset or empty
  [ -n "${!1:-}" ] || die "$1 is not set: $2"
}

need FLINK_HOME "a Flink 2.0.1 distribution (e.g. /opt/flink-2.0.1)"
[ -x "$FLINK_HOME/bin/flink" ] || die "FLINK_HOME=$FLINK_HOME has no bin/flink"
need HADOOP_CLASSPATH 'run: export HADOOP_CLASSPATH=$(hadoop classpath)'
export HADOOP_CLASSPATH

hdfs="${OMLDM_HDFS:-hdfs:///omldm}"
dist="${OMLDM_DIST:-$root/dist}"
client_python="${CLIENT_PYTHON:-$root/.venv/bin/python}"

session_conf=(
  "-Dexecution.checkpointing.dir=$hdfs/checkpoints"
  "-Dexecution.checkpointing.savepoint-dir=$hdfs/savepoints"
  "-Dexecution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION"
  "-Dstate.backend.type=hashmap"
  "-Drestart-strategy.type=exponential-delay"
  "-Drestart-strategy.exponential-delay.initial-backoff=1s"
  "-Drestart-strategy.exponential-delay.max-backoff=1min"
  "-Dpython.execution-mode=process"
  "-Dmetrics.reporter.prom.factory.class=org.apache.flink.metrics.prometheus.PrometheusReporterFactory"
  # a range: several TaskManagers of the session may share a NodeManager host
  "-Dmetrics.reporter.prom.port=9249-9259"
)

# the flink run options that ship omldm (see deploy/pack.sh)
ship_options() {
  local pyarch="${OMLDM_PYARCH:-$dist/omldm-venv.tar.gz}"
  [ -f "$dist/omldm-src.zip" ] || die "$dist/omldm-src.zip missing: run bash deploy/pack.sh (OMLDM_DIST=...)"
  [ -f "$dist/jars/flink-connector-kafka.jar" ] && [ -f "$dist/jars/kafka-clients.jar" ] \
    || die "$dist/jars/ lacks the connector jars: run bash deploy/pack.sh"
  case "$pyarch" in
    *://*) ;;
    *) [ -f "$pyarch" ] || die "$pyarch missing: run bash deploy/pack.sh (without --no-venv), or set OMLDM_PYARCH" ;;
  esac
  [ -x "$client_python" ] || die "CLIENT_PYTHON=$client_python is not executable: run bash deploy/bootstrap.sh setup, or set CLIENT_PYTHON"
  opts=(
    -pyclientexec "$client_python"
    -pyarch "$pyarch#venv" -pyexec venv/bin/python
    -pyfs "$dist/omldm-src.zip"
    -C "file://$dist/jars/flink-connector-kafka.jar" -C "file://$dist/jars/kafka-clients.jar"
  )
}

# program arguments: the caller's, plus --bootstrap-servers from the environment if absent
job_args() {
  args=("$@")
  case " $* " in
    *" --bootstrap-servers "*|*" --bootstrap-servers="*) ;;
    *) need OMLDM_BOOTSTRAP_SERVERS "Kafka host:port (or pass --bootstrap-servers)"
       args+=(--bootstrap-servers "$OMLDM_BOOTSTRAP_SERVERS") ;;
  esac
  case " $* " in *" --checkpoint-dir "*|*" --checkpoint-dir="*) ;; *) args+=(--checkpoint-dir "$hdfs/checkpoints") ;; esac
  case " $* " in *" --mode "*|*" --mode="*) ;; *) args+=(--mode process) ;; esac
}

yarn_target() { need YARN_APP_ID "the application id that 'start' printed"; target=(-t yarn-session "-Dyarn.application.id=$YARN_APP_ID"); }

case "$action" in
  start)
    queue=()
    [ -n "${YARN_QUEUE:-}" ] && queue=(-qu "$YARN_QUEUE")
    # -d: detached; the session stays up after this script ends
    "$FLINK_HOME/bin/yarn-session.sh" -d -nm omldm \
      -jm "${JM_MEMORY:-1024m}" -tm "${TM_MEMORY:-2048m}" -s "${SLOTS:-2}" \
      "${queue[@]}" "${session_conf[@]}" 2>&1 | tee "${TMPDIR:-/tmp}/omldm-yarn-session.log"
    app_id="$(grep -oE 'application_[0-9]+_[0-9]+' "${TMPDIR:-/tmp}/omldm-yarn-session.log" | tail -1 || true)"
    [ -n "$app_id" ] || die "no application id in the output (log: ${TMPDIR:-/tmp}/omldm-yarn-session.log)"
    echo "export YARN_APP_ID=$app_id"
    ;;
  submit)
    yarn_target; job_args "$@"; ship_options
    exec "$FLINK_HOME/bin/flink" run -d "${target[@]}" "${opts[@]}" \
      -py "$root/flink_jobs/flink_run.py" "${args[@]}"
    ;;
  resume)
    [ $# -ge 1 ] || die "usage: session.sh resume SAVEPOINT_PATH [flink_run.py options]"
    savepoint="$1"; shift
    yarn_target; job_args "$@"; ship_options
    exec "$FLINK_HOME/bin/flink" run -d "${target[@]}" -s "$savepoint" "${opts[@]}" \
      -py "$root/flink_jobs/flink_run.py" "${args[@]}"
    ;;
  list)
    yarn_target
    exec "$FLINK_HOME/bin/flink" list "${target[@]}"
    ;;
  stop)
    [ $# -eq 1 ] || die "usage: session.sh stop JOBID"
    yarn_target
    exec "$FLINK_HOME/bin/flink" stop "${target[@]}" --savepointPath "$hdfs/savepoints" "$1"
    ;;
  kill)
    need YARN_APP_ID "the application id that 'start' printed"
    exec yarn application -kill "$YARN_APP_ID"
    ;;
  *) usage ;;
esac
