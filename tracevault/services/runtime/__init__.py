"""The service runtime: one consumer session loop, and what keeps the sequencer, the archiver
and the witness alive across broker outages (docs/liveness.md). It imports no service.

- :class:`ConsumerRuntime` runs a service's :class:`Step` (``take(batch)``, ``restore``,
  ``release``, ``flush_due`` ...) under one Kafka session after another: the consumer (built
  through :mod:`tracevault.kafka`), assignment and revocation, poll, commit cadence, lag,
  idle, backoff and stop. The archiver and the witness run on it with offset commits at a
  cadence; the sequencer in its transactional commit mode (:class:`Transactions`, with a
  ``transactional_id`` in its :class:`Subscription`): a :class:`TransactionalStep`'s output
  and the consumed offsets commit in one transaction, aborted and rewound on failure.

- :class:`BlockingCalls` runs librdkafka's blocking calls in a daemon worker thread and waits
  at most a deadline. librdkafka does not always honour its own timeout (after a broker outage
  ``send_offsets_to_transaction`` blocked for minutes), and a main thread blocked in C never
  runs Python's signal handlers, so SIGTERM went unanswered. A call past its deadline raises
  :class:`CallDeadline`; the caller abandons that client (the worker keeps its only reference
  and drops it whenever the call returns) and builds a new one.
- :class:`KafkaWatch` follows the clients' ``error_cb`` and ``stats_cb``: whether a broker is
  up, and when the clients last lost the brokers. A fencing error right after an outage is
  librdkafka's static member outliving its session, not another process with our id.
- :func:`stop_on_signals` makes SIGTERM/SIGINT stop the service within a bound in every
  state, even while the main thread is blocked in C (Python handlers run only between
  bytecodes of the main thread; the wakeup fd is written at once, and a thread reads it).
- :class:`Sessions` is the supervisor: it runs one Kafka session after another until stop,
  with backoff, and gives up (exit 3) after too many sessions that broke while the broker
  answered; :class:`OffsetCommits` commits offsets under a deadline and defers a transient
  failure (a coordinator loading or moving after a broker restart) with backoff;
  :func:`raise_for` turns a fencing or fatal client error into a new session or a stop.
- :class:`Health` and :func:`serve` answer ``/healthz`` beside ``/metrics``: 200 while the
  service makes progress or has nothing to do, 503 with a JSON reason when it is stuck.

This module is the services' one import: each piece lives in its own private module beside
it (``_consumer``, ``_step``, ``_transactions``, ``_calls``, ``_watch``, ``_signals``,
``_supervisor``, ``_health``, ``_memory``: :func:`trim_heap`, freed heap
given back to the OS so resident memory follows live state).
"""

from tracevault.services.runtime._calls import BlockingCalls, CallDeadline, Stopping, close_quietly
from tracevault.services.runtime._consumer import ConsumerRuntime
from tracevault.services.runtime._health import Health, serve
from tracevault.services.runtime._memory import trim_heap
from tracevault.services.runtime._signals import stop_on_signals
from tracevault.services.runtime._step import (
    AbortBatch,
    Step,
    Subscription,
    Transaction,
    TransactionalStep,
)
from tracevault.services.runtime._supervisor import (
    LagReader,
    OffsetCommits,
    Sessions,
    backoff,
    consumer_lag,
)
from tracevault.services.runtime._transactions import Transactions
from tracevault.services.runtime._watch import (
    Broken,
    KafkaWatch,
    Restart,
    is_fenced,
    is_outage,
    raise_for,
)

__all__ = [
    "AbortBatch",
    "BlockingCalls",
    "Broken",
    "CallDeadline",
    "ConsumerRuntime",
    "Health",
    "KafkaWatch",
    "LagReader",
    "OffsetCommits",
    "Restart",
    "Sessions",
    "Step",
    "Stopping",
    "Subscription",
    "Transaction",
    "TransactionalStep",
    "Transactions",
    "backoff",
    "close_quietly",
    "consumer_lag",
    "is_fenced",
    "is_outage",
    "raise_for",
    "serve",
    "stop_on_signals",
    "trim_heap",
]
