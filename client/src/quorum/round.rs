//! One step on many servers at once: [`round`] sends it to each, counts the
//! answers as they come ([`Tally`]) and returns as soon as the caller's
//! rule says the outcome is decided — a majority reached, or out of reach —
//! without waiting for slow or dead servers.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use crate::quorum::node::{Answer, Node};

/// The answers of one round so far, indexed like the client's servers.
#[derive(Debug)]
pub(crate) struct Tally {
    answers: Vec<Option<Answer>>,
    asked: usize,
}

impl Tally {
    /// A tally of answers already in, one per server (all asked).
    pub(crate) fn of(answers: Vec<Option<Answer>>) -> Tally {
        let asked = answers.len();
        Tally { answers, asked }
    }

    fn count(&self, f: impl Fn(&Answer) -> bool) -> usize {
        self.answers.iter().flatten().filter(|a| f(a)).count()
    }

    /// Servers where the step took effect.
    pub(crate) fn yes(&self) -> usize {
        self.count(|a| matches!(a, Answer::Yes { .. }))
    }

    /// Servers that answered no.
    pub(crate) fn no(&self) -> usize {
        self.count(|a| matches!(a, Answer::No))
    }

    /// Servers whose fence mark was raised to the floor.
    pub(crate) fn floored(&self) -> usize {
        self.count(|a| matches!(a, Answer::Yes { floored: true, .. }))
    }

    /// Whether server `i` said yes (`Some(true)`) or anything else
    /// (`Some(false)`: no, or failed); `None` before it answered.
    pub(crate) fn yes_at(&self, i: usize) -> Option<bool> {
        self.answers.get(i)?.as_ref().map(|a| matches!(a, Answer::Yes { .. }))
    }

    /// Whether server `i` answered no.
    pub(crate) fn refused_at(&self, i: usize) -> bool {
        matches!(self.answers.get(i), Some(Some(Answer::No)))
    }

    /// Server `i`'s answer, if in.
    pub(crate) fn answer(&self, i: usize) -> Option<&Answer> {
        self.answers.get(i)?.as_ref()
    }

    /// Servers asked that have not answered (yet).
    pub(crate) fn pending(&self) -> usize {
        self.asked - self.answers.iter().flatten().count()
    }

    /// `(server index, fence)` of every grant that carried a fence.
    pub(crate) fn fences(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.answers.iter().enumerate().filter_map(|(i, a)| match a {
            Some(Answer::Yes { fence: Some(f), .. }) => Some((i, *f)),
            _ => None,
        })
    }

    /// `(server name, why)` of every server that failed, and of those asked
    /// that had not answered when the round was decided.
    pub(crate) fn failures(&self, nodes: &[Arc<Node>], asked: &[usize]) -> Vec<(String, String)> {
        asked
            .iter()
            .filter_map(|&i| match &self.answers[i] {
                Some(Answer::Failed(why)) => Some((nodes[i].name.clone(), why.clone())),
                None => Some((nodes[i].name.clone(), "no answer before the outcome was decided".into())),
                Some(_) => None,
            })
            .collect()
    }
}

/// Runs `step` (given the server's index) on the servers `asked`
/// (indices into `nodes`) in parallel,
/// each bounded by `timeout`, until `decided` holds for the tally or every
/// server has answered. Steps still running then are left to finish in the
/// background (bounded by the same timeout), not cancelled: a command
/// already on its way to a server, such as a release, still happens.
///
/// Must run inside a tokio runtime (the steps are tasks on it).
pub(crate) async fn round<S, Fut>(
    nodes: &[Arc<Node>],
    asked: &[usize],
    timeout: Duration,
    step: S,
    decided: impl Fn(&Tally) -> bool,
) -> Tally
where
    S: Fn(usize, Arc<Node>) -> Fut,
    Fut: Future<Output = Answer> + Send + 'static,
{
    let mut tally = Tally { answers: nodes.iter().map(|_| None).collect(), asked: asked.len() };
    let mut tasks = JoinSet::new();
    for &i in asked {
        let fut = step(i, nodes[i].clone());
        tasks.spawn(async move {
            let answer = tokio::time::timeout(timeout, fut).await.unwrap_or_else(|_| {
                Answer::Failed(format!(
                    "no answer within {} ms (node timeout: down, unreachable or slow)",
                    timeout.as_millis()
                ))
            });
            (i, answer)
        });
    }
    while !decided(&tally) {
        match tasks.join_next().await {
            Some(Ok((i, answer))) => tally.answers[i] = Some(answer),
            // A step that panicked stays unanswered.
            Some(Err(_)) => {}
            None => break,
        }
    }
    tasks.detach_all();
    tally
}
