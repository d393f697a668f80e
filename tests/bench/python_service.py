# A Python service for `cargo xtask bench --python-only`: THREADS threads
# (half wait for a threading.Lock that one more thread holds across
# time.sleep, the rest sleep) and TASKS asyncio tasks awaiting one
# asyncio.Event on the main thread's loop. Prints "ready" once every
# thread and task has started, then waits to be killed. One more thread
# ticks every millisecond and records how late its ticks come (the pause
# a reader of the process causes); each line read from stdin is answered
# with the longest delay since the line before ("late N us").
import asyncio
import select
import sys
import threading
import time

threads = int(sys.argv[1])
tasks = int(sys.argv[2])

lock = threading.Lock()
held = threading.Event()
started = threading.Semaphore(0)


def holder():
    with lock:
        held.set()
        time.sleep(1e9)


def lock_waiter():
    started.release()
    lock.acquire()


def sleeper():
    started.release()
    time.sleep(1e9)


def ticker():
    # The tick is the wait for a line on stdin, at most 1 ms.
    late = 0.0
    while True:
        t0 = time.monotonic()
        ready, _, _ = select.select([sys.stdin], [], [], 0.001)
        waited = time.monotonic() - t0
        if ready:
            if not sys.stdin.readline():
                return
            print(f"late {int(late * 1e6)} us", flush=True)
            late = 0.0
        else:
            late = max(late, waited - 0.001)


threading.Thread(target=ticker, name="ticker", daemon=True).start()
threading.Thread(target=holder, name="holder", daemon=True).start()
held.wait()
for i in range(threads):
    f = lock_waiter if i % 2 == 0 else sleeper
    threading.Thread(target=f, name=f"worker-{i}", daemon=True).start()
for _ in range(threads):
    started.acquire()


async def waiter(event):
    await event.wait()


async def main():
    event = asyncio.Event()
    pending = [asyncio.create_task(waiter(event)) for _ in range(tasks)]
    # One turn of the loop: every task has run to its await.
    await asyncio.sleep(0)
    print("ready", flush=True)
    await asyncio.sleep(1e9)
    del pending


asyncio.run(main())
