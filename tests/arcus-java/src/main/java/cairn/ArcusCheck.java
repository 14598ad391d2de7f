package cairn;

import java.net.SocketAddress;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import net.spy.memcached.ArcusClient;
import net.spy.memcached.CASResponse;
import net.spy.memcached.CASValue;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.ConnectionObserver;
import net.spy.memcached.collection.CollectionAttributes;
import net.spy.memcached.internal.CollectionFuture;
import net.spy.memcached.ops.CollectionOperationStatus;
import net.spy.memcached.ops.OperationStatus;
import net.spy.memcached.ops.StoreType;

/**
 * ARCUS's own Java client (arcus-java-client 1.12.1) against cairn nodes it finds through
 * ZooKeeper, used the way an ARCUS user does: {@code ArcusClient.createArcusClient(zk,
 * serviceCode, builder)}.
 *
 * <pre>
 *   java cairn.ArcusCheck plain ZK SERVICE      every key-value call the client has, one
 *                                               collection call (answered NOT_SUPPORTED) and
 *                                               the connection still in use after it
 *   java cairn.ArcusCheck failover ZK SERVICE   writes in a loop; prints "KILL NOW" once
 *                                               warmed up (the driver kills the primary with
 *                                               kill -9 then), goes on until writes succeed
 *                                               again, then reads back every acknowledged one
 * </pre>
 *
 * Exit code 0: every check passed; 1: a check failed (each failure printed as "FAIL ...").
 * Run by tests/arcus-java/run.py.
 */
public final class ArcusCheck {

  private static final List<String> failures = new ArrayList<>();

  private static void check(boolean ok, String what) {
    if (ok) {
      System.out.println("ok   " + what);
    } else {
      System.out.println("FAIL " + what);
      failures.add(what);
    }
  }

  private static void checkEq(Object got, Object expected, String what) {
    boolean ok = expected == null ? got == null : expected.equals(got);
    check(ok, what + (ok ? "" : ": got " + got + ", expected " + expected));
  }

  /** Counts the connections the client lost (it reconnects after an error line). */
  private static final class Observer implements ConnectionObserver {
    final AtomicInteger lost = new AtomicInteger();

    @Override
    public void connectionEstablished(SocketAddress sa, int reconnectCount) {
    }

    @Override
    public void connectionLost(SocketAddress sa) {
      lost.incrementAndGet();
      System.out.println("     (connection lost: " + sa + ")");
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: ArcusCheck plain|failover ZK_ADDRESS SERVICE_CODE");
      System.exit(2);
    }
    Observer observer = new Observer();
    ConnectionFactoryBuilder cfb = new ConnectionFactoryBuilder()
        // A debug build on a busy two-core machine: ARCUS's 700 ms default is too tight.
        .setOpTimeout(5000)
        .setInitialObservers(Arrays.asList((ConnectionObserver) observer));
    long started = System.nanoTime();
    ArcusClient client = ArcusClient.createArcusClient(args[1], args[2], cfb);
    System.out.printf("     client up in %d ms%n", (System.nanoTime() - started) / 1_000_000);
    try {
      if (args[0].equals("plain")) {
        plain(client, observer);
      } else if (args[0].equals("failover")) {
        failover(client);
      } else {
        System.err.println("unknown mode " + args[0]);
        System.exit(2);
      }
    } finally {
      client.shutdown();
    }
    if (!failures.isEmpty()) {
      System.out.println(failures.size() + " check(s) failed");
      System.exit(1);
    }
    System.out.println("all checks passed");
    System.exit(0);
  }

  /** The first call may come before every node's connection is up: retried for 20 s. */
  private static void firstSet(ArcusClient c) throws Exception {
    long deadline = System.currentTimeMillis() + 20_000;
    while (true) {
      try {
        if (c.set("hello", 0, "world").get(5, TimeUnit.SECONDS)) {
          return;
        }
      } catch (Exception e) {
        if (System.currentTimeMillis() > deadline) {
          throw e;
        }
      }
      Thread.sleep(100);
    }
  }

  private static void plain(ArcusClient c, Observer observer) throws Exception {
    final long s = 5;
    final TimeUnit sec = TimeUnit.SECONDS;
    firstSet(c);
    checkEq(c.get("hello"), "world", "set then get");

    // Bulk store and bulk get over every node of the service.
    Map<String, Object> many = new LinkedHashMap<>();
    for (int i = 0; i < 200; i++) {
      many.put("bulk:" + i, "value-" + i);
    }
    Map<String, OperationStatus> storeFailures =
        c.asyncStoreBulk(StoreType.set, many, 0).get(30, sec);
    checkEq(storeFailures.size(), 0, "asyncStoreBulk of 200 keys: no failure");
    Map<String, Object> got = c.getBulk(many.keySet());
    checkEq(got, many, "getBulk of the 200 keys");
    Map<String, Object> some = c.asyncGetBulk("bulk:1", "bulk:2", "nope").get(s, sec);
    checkEq(some.size(), 2, "asyncGetBulk with a missing key");

    // gets and cas.
    CASValue<Object> cv = c.gets("hello");
    check(cv != null && "world".equals(cv.getValue()), "gets");
    checkEq(c.cas("hello", cv.getCas(), "there"), CASResponse.OK, "cas with the unique");
    checkEq(c.cas("hello", cv.getCas(), "again"), CASResponse.EXISTS, "cas with an old unique");
    checkEq(c.cas("never-set", 1, "x"), CASResponse.NOT_FOUND, "cas of a missing key");
    checkEq(c.get("hello"), "there", "get after cas");

    // add, replace, append, prepend.
    checkEq(c.add("hello", 0, "no").get(s, sec), false, "add of an existing key");
    checkEq(c.add("added", 0, "yes").get(s, sec), true, "add of a new key");
    checkEq(c.replace("missing", 0, "no").get(s, sec), false, "replace of a missing key");
    checkEq(c.replace("added", 0, "replaced").get(s, sec), true, "replace");
    checkEq(c.get("added"), "replaced", "get after replace");
    checkEq(c.set("ap", 0, "b").get(s, sec), true, "set for append");
    checkEq(c.append(0, "ap", "c").get(s, sec), true, "append");
    checkEq(c.prepend(0, "ap", "a").get(s, sec), true, "prepend");
    checkEq(c.get("ap"), "abc", "get after append and prepend");
    checkEq(c.append(0, "missing", "c").get(s, sec), false, "append to a missing key");

    // incr and decr, with ARCUS's create-with-initial form.
    checkEq(c.set("n", 0, "10").get(s, sec), true, "set a counter");
    checkEq(c.incr("n", 5), 15L, "incr");
    checkEq(c.decr("n", 20), 0L, "decr stops at 0");
    checkEq(c.incr("no-counter", 1), -1L, "incr of a missing key");
    checkEq(c.asyncIncr("created", 3, 100, 0).get(s, sec), 100L,
        "asyncIncr with an initial value creates the key holding it");
    checkEq(c.asyncIncr("created", 3, 100, 0).get(s, sec), 103L, "and increments it after");
    checkEq(c.get("created"), "103", "get of the created counter");
    checkEq(c.asyncDecr("created2", 1, 50, 0).get(s, sec), 50L, "asyncDecr with an initial");
    checkEq(c.incr("created3", 2, 7, 60), 7L, "incr(key, by, def, exp)");

    // delete.
    checkEq(c.delete("added").get(s, sec), true, "delete");
    checkEq(c.get("added"), null, "get after delete");
    checkEq(c.delete("added").get(s, sec), false, "delete of a missing key");

    // A large value (the client compresses values over 16 KiB: random text stays large).
    StringBuilder big = new StringBuilder();
    Random random = new Random(7);
    for (int i = 0; i < 600_000; i++) {
      big.append((char) ('a' + random.nextInt(26)));
    }
    checkEq(c.set("large", 0, big.toString()).get(30, sec), true, "set of a 600 KB value");
    checkEq(c.get("large"), big.toString(), "get of the 600 KB value");

    // touch: arcus-java-client 1.12.1 has no touch call (its way is setattr, below).
    System.out.println("     (touch: not in arcus-java-client 1.12.1)");

    // Collections: one clean NOT_SUPPORTED each, and the connection keeps working.
    int lostBefore = observer.lost.get();
    CollectionFuture<Boolean> lop =
        c.asyncLopInsert("list", 0, "element", new CollectionAttributes());
    checkEq(lop.get(s, sec), false, "asyncLopInsert fails");
    checkEq(lop.getOperationStatus().getMessage(), "NOT_SUPPORTED",
        "asyncLopInsert's status");
    checkEq(c.get("hello"), "there", "a plain get right after the collection call");
    CollectionFuture<Map<Integer, CollectionOperationStatus>> piped =
        c.asyncLopPipedInsertBulk("list", 0, Arrays.asList((Object) "a", "b", "c"),
            new CollectionAttributes());
    Map<Integer, CollectionOperationStatus> pipedFailures = piped.get(s, sec);
    checkEq(pipedFailures.size(), 3, "asyncLopPipedInsertBulk: three failed elements");
    check(pipedFailures.values().stream()
        .allMatch(st -> "NOT_SUPPORTED".equals(st.getMessage())),
        "asyncLopPipedInsertBulk: each NOT_SUPPORTED " + pipedFailures);
    CollectionFuture<List<Object>> lopGet = c.asyncLopGet("list", 0, false, false);
    checkEq(lopGet.get(s, sec), null, "asyncLopGet gets nothing");
    checkEq(lopGet.getOperationStatus().getMessage(), "NOT_SUPPORTED", "asyncLopGet's status");
    CollectionFuture<Boolean> setAttr = c.asyncSetAttr("hello", new CollectionAttributes());
    checkEq(setAttr.get(s, sec), false, "asyncSetAttr fails");
    checkEq(c.get("hello"), "there", "a plain get after them");
    checkEq(observer.lost.get() - lostBefore, 0, "no connection lost to the collection calls");

    // The same connections still carry writes.
    checkEq(c.set("after", 0, "still").get(s, sec), true, "set after the collection calls");
    checkEq(c.get("after"), "still", "get after the collection calls");
    checkEq(observer.lost.get(), 0, "no connection lost during the whole run");
  }

  private static void failover(ArcusClient c) throws Exception {
    firstSet(c);
    Map<String, String> acked = new HashMap<>();
    int failed = 0;
    int afterFailure = 0;
    boolean killAnnounced = false;
    long firstFailure = 0;
    long recovered = 0;
    long deadline = System.currentTimeMillis() + 90_000;
    for (int i = 0; System.currentTimeMillis() < deadline; i++) {
      String key = "f:" + i;
      String value = "v" + i;
      boolean ok;
      try {
        Future<Boolean> f = c.set(key, 0, value);
        ok = f.get(5, TimeUnit.SECONDS);
      } catch (Exception e) {
        ok = false;
      }
      if (ok) {
        acked.put(key, value);
        if (failed > 0) {
          afterFailure++;
          if (recovered == 0) {
            recovered = System.currentTimeMillis();
          }
        }
      } else {
        failed++;
        if (firstFailure == 0) {
          firstFailure = System.currentTimeMillis();
        }
        Thread.sleep(50);
      }
      if (!killAnnounced && acked.size() >= 200) {
        // The driver kills the primary when it reads this line.
        System.out.println("KILL NOW");
        System.out.flush();
        killAnnounced = true;
      }
      if (killAnnounced && afterFailure >= 200) {
        break;
      }
    }
    check(killAnnounced, "200 writes acknowledged before the kill");
    System.out.println("     " + failed + " writes failed while the group had no primary");
    check(afterFailure >= 200, "200 writes acknowledged after the failover (" + afterFailure + ")");
    if (recovered > 0) {
      System.out.printf("     writes resumed %d ms after the first failure%n",
          recovered - firstFailure);
    }
    int missing = 0;
    for (Map.Entry<String, String> e : acked.entrySet()) {
      Object got = null;
      for (int attempt = 0; attempt < 3 && got == null; attempt++) {
        try {
          got = c.get(e.getKey());
        } catch (Exception ex) {
          Thread.sleep(100);
        }
      }
      if (!e.getValue().equals(got)) {
        missing++;
        if (missing <= 5) {
          System.out.println("     lost " + e.getKey() + ": got " + got);
        }
      }
    }
    checkEq(missing, 0, "every acknowledged write readable after the failover ("
        + acked.size() + " writes)");
  }
}
