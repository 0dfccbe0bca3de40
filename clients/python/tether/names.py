"""The orchestrator's contract with the control plane: the names an
orchestrator writes and reads (api/names, api/v1alpha1/orchestrator.go and
api/v1alpha1/workerbinding_types.go in Tether's Go module)."""

from typing import Final

GROUP: Final = "tether.dev"
VERSION: Final = "v1alpha1"
PLURAL: Final = "workerbindings"

BIND_LABEL: Final = "tether.dev/bind"
BIND_VALUE: Final = "true"
COMMAND_ANNOTATION: Final = "tether.dev/command"
HEADER_STREAM: Final = "X-Tether-Stream"

# The binding Service's read endpoint and the aggregated read API.
READ_PATH_PREFIX: Final = "/orchestrator/v1/namespaces/"
READ_API_GROUP: Final = "artifacts.tether.dev"
READ_API_VERSION: Final = "v1alpha1"
READ_API_SERVICE: Final = READ_API_VERSION + "." + READ_API_GROUP
READ_API_RESOURCE: Final = "workerbindings"
READ_API_SUBRESOURCE: Final = "objects"
READ_API_PATH_PREFIX: Final = "/apis/" + READ_API_GROUP + "/" + READ_API_VERSION + "/namespaces/"

# Phases (status.phase).
PHASE_PENDING: Final = "Pending"
PHASE_REGISTERED: Final = "Registered"
PHASE_RUNNING: Final = "Running"
PHASE_FINISHING: Final = "Finishing"
PHASE_SUCCEEDED: Final = "Succeeded"
PHASE_FAILED: Final = "Failed"
PHASES: Final = (PHASE_PENDING, PHASE_REGISTERED, PHASE_RUNNING, PHASE_FINISHING, PHASE_SUCCEEDED, PHASE_FAILED)

# Conditions (status.conditions[].type).
CONDITION_TOKEN_ISSUED: Final = "TokenIssued"
CONDITION_HEARTBEAT_LOST: Final = "HeartbeatLost"
CONDITION_PODS_INJECTED: Final = "PodsInjected"
CONDITION_READY: Final = "Ready"
CONDITION_SUCCEEDED: Final = "Succeeded"
CONDITION_FAILED: Final = "Failed"
CONDITION_PROGRESSING: Final = "Progressing"
CONDITION_RECONCILING: Final = "Reconciling"
CONDITION_STALLED: Final = "Stalled"
# The outcome conditions: fixed once the binding is final.
OUTCOME_CONDITION_TYPES: Final = (
    CONDITION_READY, CONDITION_SUCCEEDED, CONDITION_FAILED,
    CONDITION_PROGRESSING, CONDITION_RECONCILING, CONDITION_STALLED,
)

# Reasons a caller commonly acts on (status.reason, conditions).
REASON_CANCELLED: Final = "Cancelled"
REASON_CANCELLING: Final = "Cancelling"
REASON_TRAINER_SUCCEEDED: Final = "TrainerSucceeded"
REASON_TRAINER_FAILED: Final = "TrainerFailed"
REASON_ARTIFACTS_INCOMPLETE: Final = "ArtifactsIncomplete"
REASON_REQUIRED_OUTPUTS_MISSING: Final = "RequiredOutputsMissing"
REASON_TRAINER_STALLED: Final = "TrainerStalled"

# Command states (status.lastCommand.state) and names.
COMMAND_SENT: Final = "Sent"
COMMAND_ACKNOWLEDGED: Final = "Acknowledged"
COMMAND_FAILED: Final = "Failed"
FLUSH: Final = "flush"
DRAIN: Final = "drain"
CANCEL: Final = "cancel"

# Object keys under a job's prefix (pkg/upload).
MANIFEST_NAME: Final = "manifest.json"
NODES_DIR: Final = "nodes"
LOGS_DIR: Final = ".tether/logs/"
MAX_MANIFEST_SIZE: Final = 16 << 20

# Kubeflow Trainer and Kueue.
TRAINJOB_GROUP: Final = "trainer.kubeflow.org"
TRAINJOB_VERSION: Final = "v1alpha1"
TRAINJOB_PLURAL: Final = "trainjobs"
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
KUEUE_JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"


def node_prefix(rank: int) -> str:
    """Where rank's files are under the job's prefix: "" for rank 0, else nodes/<rank>/."""
    return "" if rank <= 0 else f"{NODES_DIR}/{rank}/"


def manifest_key(job_id: str, rank: int) -> str:
    """The object key of node rank's manifest."""
    return f"{job_id}/{node_prefix(rank)}{MANIFEST_NAME}"


def log_key(job_id: str, pod: str) -> str:
    """The object key of pod's archived trainer log."""
    return f"{job_id}/{LOGS_DIR}{pod}.log"
