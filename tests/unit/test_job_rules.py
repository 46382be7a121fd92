"""The job rules the console and the dispatcher share (app/jobs/rules.py): each rule on job
rows as JobStore gives them, one case at a time."""

import pytest

from app import status as st
from app.jobs import rules


def job(state="done", status=None, type="backup", not_after=None, params=None, **kw):
    return dict(kw, state=state, status=status, type=type, not_after=not_after,
                params={} if params is None else params)


SCHEDULED = dict(not_after=1_900_000_000.0)


# ---- category -------------------------------------------------------------------------------

@pytest.mark.parametrize("state", ["queued", "active"])
def test_a_job_that_has_not_ended_counts_in_its_state(state):
    assert rules.category(job(state)) == state


@pytest.mark.parametrize("status", [st.OK, st.PARTIAL])
def test_an_ended_job_with_status_0_or_1_is_done(status):
    assert rules.category(job("done", status)) == "done"


@pytest.mark.parametrize("status", [st.WINDOW_CLOSED, st.VOLUME_UNAVAILABLE,
                                    st.INTERNAL, None])
def test_an_ended_job_with_any_other_status_is_failed(status):
    assert rules.category(job("done", status)) == "failed"


def test_a_canceled_job_is_counted_apart_from_the_failed_and_can_be_restarted():
    j = dict(job("done", st.CANCELED), type="backup")
    assert rules.category(j) == "canceled"
    assert rules.restartable(j)


def test_the_categories_are_the_filters_states_in_order():
    assert rules.CATEGORIES == ("queued", "active", "done", "failed", "canceled")


# ---- cancellable ---------------------------------------------------------------------------

@pytest.mark.parametrize("state", ["queued", "active"])
def test_a_queued_or_running_job_can_be_canceled(state):
    assert rules.cancellable(job(state))


@pytest.mark.parametrize("status", [st.OK, st.VOLUME_UNAVAILABLE, st.CANCELED])
def test_an_ended_job_cannot_be_canceled(status):
    assert not rules.cancellable(job("done", status))


# ---- restartable ---------------------------------------------------------------------------

@pytest.mark.parametrize("type", ["backup", "restore"])
@pytest.mark.parametrize("status", [st.VOLUME_UNAVAILABLE, st.CANCELED, st.WINDOW_CLOSED])
def test_a_failed_or_canceled_backup_or_restore_can_be_restarted(type, status):
    assert rules.restartable(job("done", status, type))


@pytest.mark.parametrize("status", [st.OK, st.PARTIAL])
def test_a_job_that_succeeded_is_not_restarted(status):
    assert not rules.restartable(job("done", status))


@pytest.mark.parametrize("state", ["queued", "active"])
def test_a_job_that_has_not_ended_is_not_restarted(state):
    assert not rules.restartable(job(state))


@pytest.mark.parametrize("type", ["verify", "reclaim", "expire", "rebuild-index", "cleanup",
                                  "backup-set"])
def test_only_backups_and_restores_are_restarted(type):
    assert not rules.restartable(job("done", st.INTERNAL, type))


# ---- retried ------------------------------------------------------------------------------

def test_a_scheduled_backup_is_tried_again_by_itself():
    assert rules.retried(job(**SCHEDULED))


def test_a_backup_started_by_hand_is_not_tried_again():
    assert not rules.retried(job())


def test_the_parent_of_a_backups_streams_is_not_tried_again():
    assert not rules.retried(job(params={"streams": 4}, **SCHEDULED))


@pytest.mark.parametrize("type", ["restore", "verify", "expire"])
def test_other_jobs_are_not_tried_again(type):
    assert not rules.retried(job(type=type, **SCHEDULED))


def test_a_job_row_without_params_is_read_as_without_streams():
    assert rules.retried(dict(job(**SCHEDULED), params=None))


# ---- retry_wanted --------------------------------------------------------------------------

@pytest.mark.parametrize("status", [st.VOLUME_UNAVAILABLE, st.HOST_UNREACHABLE,
                                    st.AGENT_FAILED, st.POOL_FULL, st.INTERNAL])
def test_a_scheduled_backup_that_failed_is_worth_another_attempt(status):
    assert rules.retry_wanted(job("done", status, **SCHEDULED))


@pytest.mark.parametrize("status", sorted(rules.NO_RETRY))
def test_a_status_another_attempt_cannot_mend_is_not_retried(status):
    assert not rules.retry_wanted(job("done", status, **SCHEDULED))


def test_success_cancel_and_a_missed_window_are_never_retried():
    assert {st.OK, st.PARTIAL, st.CANCELED, st.WINDOW_CLOSED} <= rules.NO_RETRY


def test_a_failed_backup_started_by_hand_is_not_retried():
    assert not rules.retry_wanted(job("done", st.VOLUME_UNAVAILABLE))


def test_a_failed_stream_parent_is_not_retried():
    assert not rules.retry_wanted(job("done", st.VOLUME_UNAVAILABLE, params={"streams": 2},
                                      **SCHEDULED))


def test_time_left_is_never_zero_while_data_remains():
    from app.jobs.store import job_dict
    row = dict(id=1, state="active", status=None, params="{}", started=None, ended=None,
               bytes=84 << 20, files=1, total_bytes=100 << 20, total_files=2,
               rate_bytes_per_s=400 << 20, cancel_requested=0)
    d = job_dict(row)
    assert d["percent"] == 84.0 and d["eta_s"] == 1
