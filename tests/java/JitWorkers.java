// 200 threads blocked inside a JIT-compiled Java method, `JitWorkers.hold`,
// for tests/tests/jit_symbols.rs. Run it with
// `-XX:TieredStopAtLevel=1 -Xbatch -XX:+PreserveFramePointer`: C1 compiles
// both branches of `hold` (C2 would compile the untaken one as a trap and
// fall back to the interpreter when it is taken), -Xbatch compiles it
// before the warm-up returns, and the frame pointer lets a stack walk
// cross compiled frames. Prints `ready` once every worker waits in `hold`.
public class JitWorkers {
    static final int WORKERS = 200;
    static volatile boolean block = false;
    static final java.util.concurrent.CountDownLatch started =
        new java.util.concurrent.CountDownLatch(WORKERS);

    static int hold(Object lock, int n) throws InterruptedException {
        int s = 0;
        for (int i = 0; i < n; i++) {
            s += i ^ (s >>> 3);
        }
        if (block) {
            synchronized (lock) {
                started.countDown();
                while (true) {
                    lock.wait();
                }
            }
        }
        return s;
    }

    public static void main(String[] args) throws Exception {
        // Warm-up: enough calls for C1 to compile `hold`.
        Object warm = new Object();
        for (int i = 0; i < 20000; i++) {
            hold(warm, 50);
        }
        block = true;
        Object[] locks = new Object[WORKERS];
        for (int i = 0; i < WORKERS; i++) {
            final Object lock = locks[i] = new Object();
            Thread t = new Thread(() -> {
                try {
                    hold(lock, 1);
                } catch (InterruptedException e) {
                }
            }, "worker-" + i);
            t.setDaemon(true);
            t.start();
        }
        // Each worker counts down holding its lock, and lets it go only
        // in `wait`: once main has taken every lock, all of them wait.
        started.await();
        for (Object lock : locks) {
            synchronized (lock) {
            }
        }
        System.out.println("ready");
        System.out.flush();
        // Until the test closes stdin or kills us.
        while (System.in.read() >= 0) {
        }
    }
}
