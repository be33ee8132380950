"""Atari Pong with IMPALA: many agents on worker processes, each acting on a replica (``parl train pong_impala``)."""
