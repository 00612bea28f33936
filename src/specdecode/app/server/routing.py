"""Which engine replica serves a request: the one that served its conversation before, unless it
is overloaded; otherwise the least loaded.

A replica keeps what a conversation's later turns can use (the suffix drafter's memory of earlier
answers; `ray_ingress` names the conversation by its opening), so sending every turn to one replica
is worth a little imbalance, and only a little: a replica with `imbalance` more requests in flight
than the least loaded one loses the conversation to that one (the conversation's home moves with
it). A new conversation goes to the least loaded replica, of those tied the one with the fewest
conversations, so that conversations spread over idle replicas instead of all landing on one.
Ray Serve calls this in the process that holds the handle (the ingress), with the queue lengths
its replicas report, and sends the request to the first rank's replica unless that one is full,
then to the least loaded of the second rank's (all replicas).
"""

from __future__ import annotations

from collections import Counter, OrderedDict

from ray.serve.request_router import (
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

IMBALANCE = 4  # requests in flight beyond the least loaded replica's before a conversation moves
REMEMBERED = 100_000  # conversations whose replica is kept (least recently routed forgotten)


def _conversation(request: PendingRequest | None) -> str | None:
    if request is None or not request.args:
        return None
    return getattr(request.args[0], "conversation", None)


class ConversationRouter(RequestRouter):
    def initialize_state(self, imbalance: int = IMBALANCE,
                         remembered: int = REMEMBERED) -> None:
        self.imbalance, self.remembered = imbalance, remembered
        self.homes: OrderedDict[str, ReplicaID] = OrderedDict()
        self.conversations: Counter[ReplicaID] = Counter()  # homes per replica

    def _load(self, replica: RunningReplica) -> int:
        return self.replica_queue_len_cache.get(replica.replica_id) or 0

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None
                              ) -> list[list[RunningReplica]]:
        spread = sorted(candidate_replicas,
                        key=lambda r: (self._load(r), self.conversations[r.replica_id]))
        key = _conversation(pending_request)
        choice = spread[0]
        for replica in candidate_replicas:
            if replica.replica_id == self.homes.get(key):
                if self._load(replica) <= self._load(spread[0]) + self.imbalance:
                    choice = replica
                break
        if key is not None:
            # remembered as chosen (Ray Serve tells a router where a request went only when
            # replicas may reject requests); a full replica passes it on to the next rank's,
            # and its next turn moves there
            self._remember(key, choice.replica_id)
        return [[choice], spread]

    def _remember(self, key: str, replica_id: ReplicaID) -> None:
        if key in self.homes:
            self.conversations[self.homes[key]] -= 1
        self.homes[key] = replica_id
        self.homes.move_to_end(key)
        self.conversations[replica_id] += 1
        if len(self.homes) > self.remembered:
            self.conversations[self.homes.popitem(last=False)[1]] -= 1
