//! A real S3-compatible server (s3s-fs) on 127.0.0.1 for the tests and the
//! export and archive benches (which include this file): the directories
//! of a root serve as buckets, behind one key pair.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The access key the server accepts.
pub const KEY: &str = "cellar-test-key";
/// Its secret.
pub const SECRET: &str = "cellar-test-secret";

/// A client of bucket `bucket` of the server at `endpoint`, with the
/// server's credentials (for plain copies next to Cellar's).
pub fn client(endpoint: &str, bucket: &str) -> object_store::aws::AmazonS3 {
    object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(KEY)
        .with_secret_access_key(SECRET)
        .build()
        .unwrap()
}

/// Sets `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` to the server's, for
/// code that reads credentials from the environment.
///
/// # Safety
/// Only before any other thread is started (it changes the environment).
pub unsafe fn export_credentials() {
    unsafe {
        std::env::set_var("AWS_ACCESS_KEY_ID", KEY);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", SECRET);
    }
}

/// Starts the server over `root`; returns its endpoint (`http://...`). It
/// runs until the calling runtime ends.
pub async fn start(root: &std::path::Path) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve(root, listener, None)
}

/// Serves `root` on `listener` from the current runtime. With `dies`, the
/// server stops answering (every connection dropped) at the request that
/// would be its `limit`th PUT: a server that dies in the middle of an
/// upload.
fn serve(
    root: &std::path::Path,
    listener: tokio::net::TcpListener,
    dies: Option<(usize, Arc<tokio::sync::Notify>)>,
) -> String {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder;
    let fs = s3s_fs::FileSystem::new(root).unwrap();
    let mut b = s3s::service::S3ServiceBuilder::new(fs);
    b.set_auth(s3s::auth::SimpleAuth::from_single(KEY, SECRET));
    let service = b.build();
    let addr = listener.local_addr().unwrap();
    let puts = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            // As servers do: without it, a response written in pieces
            // waits for the client's delayed ACK (~40 ms a request).
            let _ = socket.set_nodelay(true);
            let service = service.clone();
            let (puts, dies) = (puts.clone(), dies.clone());
            let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let service = service.clone();
                if std::env::var_os("CELLAR_S3_TRACE").is_some() {
                    eprintln!("S3 {} {} {:?}", req.method(), req.uri(), req.headers().get("range"));
                }
                let dead = match &dies {
                    Some((limit, stop)) if req.method() == hyper::Method::PUT => {
                        let n = puts.fetch_add(1, Ordering::SeqCst) + 1;
                        if n >= *limit {
                            stop.notify_one();
                        }
                        n >= *limit
                    }
                    _ => false,
                };
                async move {
                    if dead {
                        // Never answers: the runtime is being shut down.
                        std::future::pending::<()>().await;
                    }
                    hyper::service::Service::call(&service, req).await
                }
            });
            tokio::spawn(async move {
                let _ = Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(socket), svc)
                    .await;
            });
        }
    });
    format!("http://{addr}")
}

/// A server on a runtime of its own that dies (stops listening, drops
/// every connection) at its `puts`th PUT request, or when stopped.
pub struct DyingServer {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    stop: Arc<tokio::sync::Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DyingServer {
    /// Starts it over `root`; `puts`: usize::MAX never dies by itself.
    pub fn start(root: &std::path::Path, puts: usize) -> Self {
        let stop = Arc::new(tokio::sync::Notify::new());
        let (tx, rx) = std::sync::mpsc::channel();
        let (root, stop2) = (root.to_path_buf(), stop.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(serve(&root, listener, Some((puts, stop2.clone())))).unwrap();
                stop2.notified().await;
            });
            // Every connection goes with the runtime.
            rt.shutdown_background();
        });
        DyingServer {
            endpoint: rx.recv().unwrap(),
            stop,
            thread: Some(thread),
        }
    }

    /// Stops it now (and waits until it is gone).
    pub fn stop(&mut self) {
        self.stop.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DyingServer {
    fn drop(&mut self) {
        self.stop();
    }
}
