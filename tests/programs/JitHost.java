// A JVM under the tracer: HotSpot's JIT compiles the hot loops, its own
// threads (compiler, GC) and signal handlers run beside ours, and the exit
// status is ours. Run as a source file (java JitHost.java). Prints a
// deterministic result.
import java.util.ArrayList;
import java.util.Collections;

public class JitHost {
    static long work(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) {
            s += (i % 7) * (i & 3);
        }
        return s;
    }

    public static void main(String[] args) throws Exception {
        long[] fromThread = new long[1];
        Thread t = new Thread(() -> fromThread[0] = work(20_000_000));
        t.start();
        ArrayList<String> words = new ArrayList<>();
        for (int i = 0; i < 50_000; i++) {
            words.add(Integer.toString(i * 7919 % 10007, 36));
        }
        Collections.sort(words);
        long main = work(40_000_000);
        t.join();
        System.out.println(main + " " + fromThread[0] + " " + words.get(0) + " " + words.get(words.size() - 1));
        System.exit(3);
    }
}
