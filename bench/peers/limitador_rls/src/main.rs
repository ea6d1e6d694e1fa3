//! limitador_rls: Envoy's rate limit gRPC service over Kuadrant's `limitador` library, the
//! way limitador's own server maps a request: the domain is the namespace, the request's
//! descriptors are bound as `descriptors` (a list of key/value maps) for the limits' CEL
//! variables, and one check-and-update covers every limit that applies.
//!
//!   limitador_rls --grpc 127.0.0.1:8081 --storage memory|redis|redis_cached
//!                 [--redis redis://127.0.0.1:6379] --limit bench:remote_address:100:1 ...
//!
//! `--limit NAMESPACE:KEY:MAX:SECONDS` adds a limit of MAX per SECONDS (limitador's fixed
//! window) keyed on the value of descriptor entry KEY of the first descriptor.
use std::collections::HashMap;
use std::sync::Arc;

use limitador::limit::{Context, Expression, Limit, Predicate};
use limitador::storage::redis::{AsyncRedisStorage, CachedRedisStorageBuilder};
use limitador::{AsyncRateLimiter, RateLimiter};
use tonic::{Request, Response, Status};

pub mod pb {
    pub mod envoy {
        pub mod config {
            pub mod core {
                pub mod v3 {
                    tonic::include_proto!("envoy.config.core.v3");
                }
            }
        }
        pub mod r#type {
            pub mod v3 {
                tonic::include_proto!("envoy.r#type.v3");
            }
        }
        pub mod extensions {
            pub mod common {
                pub mod ratelimit {
                    pub mod v3 {
                        tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                    }
                }
            }
        }
        pub mod service {
            pub mod ratelimit {
                pub mod v3 {
                    tonic::include_proto!("envoy.service.ratelimit.v3");
                }
            }
        }
    }
}
use pb::envoy::service::ratelimit::v3 as rls;

enum Limiter {
    Blocking(RateLimiter),
    Async(AsyncRateLimiter),
}

struct Service {
    limiter: Arc<Limiter>,
}

fn text(bytes: &[u8]) -> Result<String, Status> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Status::invalid_argument("not UTF-8"))
}

#[tonic::async_trait]
impl rls::rate_limit_service_server::RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<rls::RateLimitRequest>,
    ) -> Result<Response<rls::RateLimitResponse>, Status> {
        let req = request.into_inner();
        let namespace: limitador::limit::Namespace = text(&req.domain)?.as_str().into();
        let mut descriptors = Vec::with_capacity(req.descriptors.len());
        for d in &req.descriptors {
            let mut map = HashMap::with_capacity(d.entries.len());
            for e in &d.entries {
                map.insert(text(&e.key)?, text(&e.value)?);
            }
            descriptors.push(map);
        }
        let mut ctx = Context::default();
        ctx.list_binding("descriptors".to_string(), descriptors);
        let hits = u64::from(req.hits_addend.max(1));
        let result = match self.limiter.as_ref() {
            Limiter::Blocking(l) => l.check_rate_limited_and_update(&namespace, &ctx, hits),
            Limiter::Async(l) => l.check_rate_limited_and_update(&namespace, &ctx, hits).await,
        }
        .map_err(|e| Status::unavailable(format!("limitador: {e:?}")))?;
        let code = if result.limited { rls::rate_limit_response::Code::OverLimit } else { rls::rate_limit_response::Code::Ok };
        Ok(Response::new(rls::RateLimitResponse { overall_code: code as i32, ..Default::default() }))
    }
}

fn parse_limit(spec: &str) -> Result<Limit, String> {
    let parts: Vec<&str> = spec.split(':').collect();
    if parts.len() != 4 {
        return Err(format!("--limit {spec}: want NAMESPACE:KEY:MAX:SECONDS"));
    }
    let max: u64 = parts[2].parse().map_err(|_| format!("--limit {spec}: MAX is not a number"))?;
    let secs: u64 = parts[3].parse().map_err(|_| format!("--limit {spec}: SECONDS is not a number"))?;
    let var = format!("descriptors[0].{}", parts[1]);
    let var = Expression::parse(var).map_err(|e| format!("--limit {spec}: {e:?}"))?;
    Ok(Limit::new(parts[0], max, secs, Vec::<Predicate>::new(), vec![var]))
}

fn usage(msg: &str) -> ! {
    eprintln!("limitador_rls: {msg}\nusage: limitador_rls --grpc ADDR --storage memory|redis|redis_cached [--redis URL] --limit NS:KEY:MAX:SECONDS...");
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    let (mut grpc, mut storage, mut redis) = (None, None, "redis://127.0.0.1:6379".to_string());
    let mut limits = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--grpc" => grpc = Some(value),
            "--storage" => storage = Some(value),
            "--redis" => redis = value,
            "--limit" => limits.push(parse_limit(&value).unwrap_or_else(|e| usage(&e))),
            _ => usage(&format!("unknown flag {flag}")),
        }
    }
    let addr = grpc.unwrap_or_else(|| usage("--grpc is required")).parse().unwrap_or_else(|_| usage("--grpc: not HOST:PORT"));
    let limiter = match storage.as_deref() {
        Some("memory") => Limiter::Blocking(RateLimiter::new(1_000_000)),
        Some("redis") => Limiter::Async(AsyncRateLimiter::new_with_storage(Box::new(
            AsyncRedisStorage::new(&redis).await.unwrap_or_else(|e| usage(&format!("--redis: {e}"))),
        ))),
        Some("redis_cached") => Limiter::Async(AsyncRateLimiter::new_with_storage(Box::new(
            CachedRedisStorageBuilder::new(&redis).build().await.unwrap_or_else(|e| usage(&format!("--redis: {e}"))),
        ))),
        _ => usage("--storage must be memory, redis or redis_cached"),
    };
    for l in limits {
        match &limiter {
            Limiter::Blocking(r) => r.add_limit(l),
            Limiter::Async(r) => r.add_limit(l),
        };
    }
    let svc = Service { limiter: Arc::new(limiter) };
    eprintln!("limitador_rls listening on {addr}");
    tonic::transport::Server::builder()
        .add_service(rls::rate_limit_service_server::RateLimitServiceServer::new(svc))
        .serve(addr)
        .await
        .expect("serving");
}
