// The Curator peer of lockkit-zk's `zk_peer_cycle` example: the uncontended cycle of
// Curator's InterProcessMutex (acquire, release) on one ZooKeeper session, timed in the JVM.
//
// Usage: java -cp CLASSPATH CuratorCycle CONNECT_STRING LOCK_PATH
// Reads a count of cycles per line on stdin and answers each line with the cycles' times in
// microseconds, separated by spaces; "0" or end of input stops it. Started and driven by the
// example, which interleaves these rounds with lockkit's so that both see the same load.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

public final class CuratorCycle {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString(args[0])
            .sessionTimeoutMs(30_000)
            .retryPolicy(new RetryOneTime(100))
            .build();
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("no ZooKeeper session within 30 s at " + args[0]);
        }
        InterProcessMutex mutex = new InterProcessMutex(client, args[1]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        System.out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            int count = Integer.parseInt(line.trim());
            if (count <= 0) {
                break;
            }
            StringBuilder out = new StringBuilder();
            for (int i = 0; i < count; i++) {
                long start = System.nanoTime();
                mutex.acquire();
                mutex.release();
                long micros = (System.nanoTime() - start) / 1_000;
                if (i > 0) {
                    out.append(' ');
                }
                out.append(micros);
            }
            System.out.println(out);
            System.out.flush();
        }
        client.close();
    }
}
