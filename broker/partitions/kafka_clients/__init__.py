"""Kafka client-protocol state kept by the broker, apart from partitions and records.

What a Kafka client's session leaves behind on the broker and what a Kafka answer needs besides records:
producer ids and idempotent sequences (producer_ids, producer_state), the checks of a client's batch
(client_batches), reads in Kafka's terms (client_reads), committed group offsets and their admin
(group_offsets, group_admin), and transactions (transactions: the coordinator's state;
txn_partition: a partition's open and aborted transactions and its last stable offset).
api/kafka translates the wire protocol onto these modules.
"""
