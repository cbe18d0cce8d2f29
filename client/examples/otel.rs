//! Exports the client's `tracing` spans through OpenTelemetry: a
//! `tracing-opentelemetry` layer turns each `redis_lock.acquire` and
//! `redis_lock.held` span (and the events in them) into an OpenTelemetry
//! span, here collected by the SDK's in-memory exporter and printed; a
//! service swaps in its OTLP exporter (`opentelemetry-otlp`) the same way.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run -p redis-lock-client --example otel
//! ```
//!
//! The dependencies (`tracing-subscriber`, `tracing-opentelemetry`,
//! `opentelemetry`, `opentelemetry_sdk`) are the application's: the client
//! itself depends on `tracing` alone.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use redis_lock_client::{LockClient, LockOptions, WatchdogOptions};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let tracer = provider.tracer("redis-lock-example");
    // The client's spans and events (target `redis_lock`) down to DEBUG (the
    // renewal batches), and this program's own span (target `otel`).
    let filter = tracing_subscriber::filter::Targets::new()
        .with_target(redis_lock_client::trace::TARGET, tracing::Level::DEBUG)
        .with_target("otel", tracing::Level::INFO);
    tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer)).with(filter).init();

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let client = LockClient::open(&url)?;
    {
        // The caller's own span: the parent of the client's spans.
        let _job = tracing::info_span!("nightly_job").entered();
        let opts = LockOptions::new().watchdog(WatchdogOptions::new());
        let lock = client.acquire_with("jobs:nightly", Duration::from_secs(3), Duration::from_secs(5), &opts)?;
        std::thread::sleep(Duration::from_millis(1500)); // the watchdog renews once
        lock.release()?;
    }

    provider.force_flush()?;
    for span in exporter.get_finished_spans()? {
        let attrs: Vec<String> = span.attributes.iter().map(|kv| format!("{}={}", kv.key, kv.value)).collect();
        println!("{} [{}]", span.name, attrs.join(" "));
        for e in span.events.iter() {
            let attrs: Vec<String> = e.attributes.iter().map(|kv| format!("{}={}", kv.key, kv.value)).collect();
            println!("  event {} [{}]", e.name, attrs.join(" "));
        }
    }
    provider.shutdown()?;
    Ok(())
}
