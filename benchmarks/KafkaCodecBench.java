import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.LongSupplier;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.CompressionType;
import org.apache.kafka.common.record.DefaultRecordBatch;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MemoryRecordsBuilder;
import org.apache.kafka.common.record.MutableRecordBatch;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.utils.BufferSupplier;
import org.apache.kafka.common.utils.CloseableIterator;
import org.apache.kafka.common.utils.Utils;

/**
 * The kafka-clients side of benchmarks/codec_bench.py: encode and decode throughput of Apache kafka-clients'
 * own record classes on the workload files that codec_bench.py writes, so both sides see the same records
 * and decode the same bytes.
 *
 * <p>Encode is what a producer does: one MemoryRecordsBuilder per batch (magic 2, CreateTime), record by
 * record. Decode is what a consumer does: ensureValid() (the CRC) on each batch, then its streaming
 * iterator with key and value copied into byte arrays, as the consumer's fetcher does before
 * deserializing. Each (codec, op) is warmed up for the JIT, then timed as the best of N full passes, by the
 * wall clock and by this thread's CPU time (which leaves out time the shared machine gave to other work,
 * and the serial collector's pauses, which run on the VM thread: the conservative side for klake).
 *
 * <p>Workload file (big-endian): "KLBENCH1", int32 value size, int32 records per batch, int32 record count
 * n, int32[n] key lengths, key bytes, int32[n] value lengths, value bytes, int64[n] timestamps, int32
 * codec count, then per codec: int32 codec id, int32 length, klake's encoded batches back to back.
 *
 * <p>Prints JSON lines: {"jvm": ...} once, {"check": ...} per correctness check (decoded records equal
 * the input; uncompressed batches equal klake's bytes; compressed ones decode back to the input), and
 * {"op": ...} per timing. A failed check or a Java exception is reported as a check, never a crash.
 *
 * <p>Run: java -cp KAFKA_CLIENTS_JARS benchmarks/KafkaCodecBench.java [--runs N] [--warmup-ms MS] FILE...
 */
public final class KafkaCodecBench {
    private static final byte[] MAGIC = "KLBENCH1".getBytes();
    /** Keeps the JIT from discarding work whose result is otherwise unused. */
    private static long blackhole;
    private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

    private record Workload(int valueSize, int batchRecords, byte[][] keys, byte[][] values, long[] timestamps,
                            Map<Integer, byte[]> encoded) {
        int size() {
            return keys.length;
        }
    }

    public static void main(String[] args) throws IOException {
        int runs = 5;
        long warmupNanos = 2_000_000_000L;
        List<Path> files = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--runs" -> runs = Integer.parseInt(args[++i]);
                case "--warmup-ms" -> warmupNanos = Long.parseLong(args[++i]) * 1_000_000L;
                default -> files.add(Path.of(args[i]));
            }
        }
        String gc = String.join("+", java.lang.management.ManagementFactory.getGarbageCollectorMXBeans().stream()
                .map(java.lang.management.GarbageCollectorMXBean::getName).toList());
        System.out.println(String.format(Locale.ROOT, "{\"jvm\":\"%s %s\",\"cpus\":%d,\"gc\":\"%s\",\"max_heap_mb\":%d}",
                json(System.getProperty("java.vm.name")), json(System.getProperty("java.version")),
                Runtime.getRuntime().availableProcessors(), json(gc), Runtime.getRuntime().maxMemory() >> 20));
        for (Path file : files) {
            Workload w = read(file);
            for (Map.Entry<Integer, byte[]> e : w.encoded().entrySet()) {
                bench(w, e.getKey(), e.getValue(), runs, warmupNanos);
            }
        }
    }

    private static Workload read(Path file) throws IOException {
        try (InputStream raw = Files.newInputStream(file);
             DataInputStream in = new DataInputStream(new java.io.BufferedInputStream(raw, 1 << 20))) {
            byte[] magic = in.readNBytes(MAGIC.length);
            if (!Arrays.equals(magic, MAGIC)) {
                throw new IOException(file + " is not a codec_bench workload file");
            }
            int valueSize = in.readInt();
            int batchRecords = in.readInt();
            int n = in.readInt();
            byte[][] keys = readColumn(in, n);
            byte[][] values = readColumn(in, n);
            long[] timestamps = new long[n];
            for (int i = 0; i < n; i++) {
                timestamps[i] = in.readLong();
            }
            Map<Integer, byte[]> encoded = new LinkedHashMap<>();
            int codecs = in.readInt();
            for (int c = 0; c < codecs; c++) {
                int codec = in.readInt();
                encoded.put(codec, in.readNBytes(in.readInt()));
            }
            return new Workload(valueSize, batchRecords, keys, values, timestamps, encoded);
        }
    }

    private static byte[][] readColumn(DataInputStream in, int n) throws IOException {
        int[] lengths = new int[n];
        for (int i = 0; i < n; i++) {
            lengths[i] = in.readInt();
        }
        byte[][] column = new byte[n][];
        for (int i = 0; i < n; i++) {
            column[i] = lengths[i] < 0 ? null : in.readNBytes(lengths[i]);
        }
        return column;
    }

    private static void bench(Workload w, int codecId, byte[] klakeBytes, int runs, long warmupNanos) {
        CompressionType type = CompressionType.forId(codecId);
        Compression compression = Compression.of(type).build();
        String where = String.format(Locale.ROOT, "\"codec\":\"%s\",\"value_size\":%d", type.name, w.valueSize());
        int[] capacities = capacities(w);
        ByteBuffer input = ByteBuffer.wrap(klakeBytes);
        try (BufferSupplier supplier = BufferSupplier.create()) {
            if (check(where, "decode", verify(w, input, supplier))) {
                time(where, "decode", w.size(), klakeBytes.length, runs, warmupNanos, () -> decode(input, supplier));
            }
            List<ByteBuffer> built = new ArrayList<>();
            long encodedBytes = encode(w, compression, capacities, built);
            ByteBuffer ours = concat(built, encodedBytes);
            String roundTrip = type == CompressionType.NONE ? sameBytes(ours.array(), klakeBytes) : verify(w, ours, supplier);
            if (check(where, "encode", roundTrip)) {
                time(where, "encode", w.size(), encodedBytes, runs, warmupNanos,
                        () -> encode(w, compression, capacities, null));
            }
        } catch (RuntimeException e) {
            check(where, "run", e.toString());
        }
    }

    /** Prints a check line; a null problem is a pass. */
    private static boolean check(String where, String what, String problem) {
        System.out.println(String.format(Locale.ROOT, "{\"check\":\"%s\",%s,\"ok\":%b,\"detail\":\"%s\"}", what, where,
                problem == null, problem == null ? "" : json(problem)));
        return problem == null;
    }

    private static void time(String where, String op, int records, long bytes, int runs, long warmupNanos,
                             LongSupplier pass) {
        long warmupStart = System.nanoTime();
        int warmups = 0;
        while (warmups < 3 || System.nanoTime() - warmupStart < warmupNanos) {
            blackhole += pass.getAsLong();
            warmups++;
        }
        long best = Long.MAX_VALUE;
        long bestCpu = Long.MAX_VALUE;
        for (int r = 0; r < runs; r++) {
            long c0 = THREADS.getCurrentThreadCpuTime();
            long t0 = System.nanoTime();
            blackhole += pass.getAsLong();
            best = Math.min(best, System.nanoTime() - t0);
            bestCpu = Math.min(bestCpu, THREADS.getCurrentThreadCpuTime() - c0);
        }
        System.out.println(String.format(Locale.ROOT,
                "{\"op\":\"%s\",%s,\"records\":%d,\"bytes\":%d,\"warmup_passes\":%d,\"best_s\":%.6f,\"records_per_s\":%.1f,"
                        + "\"best_cpu_s\":%.6f,\"records_per_cpu_s\":%.1f}",
                op, where, records, bytes, warmups, best / 1e9, records / (best / 1e9), bestCpu / 1e9,
                records / (bestCpu / 1e9)));
    }

    /** Output buffer per batch, sized for the uncompressed records so that no builder has to grow it. */
    private static int[] capacities(Workload w) {
        int batches = (w.size() + w.batchRecords() - 1) / w.batchRecords();
        int[] capacities = new int[batches];
        for (int i = 0; i < w.size(); i++) {
            int payload = (w.keys()[i] == null ? 0 : w.keys()[i].length) + (w.values()[i] == null ? 0 : w.values()[i].length);
            capacities[i / w.batchRecords()] += payload + 32;  // 32 >= a v2 record's framing without headers
        }
        for (int b = 0; b < batches; b++) {
            capacities[b] += DefaultRecordBatch.RECORD_BATCH_OVERHEAD;
        }
        return capacities;
    }

    /** One builder per batch; base offsets run on as in klake's encode_batches. Returns the bytes written. */
    private static long encode(Workload w, Compression compression, int[] capacities, List<ByteBuffer> out) {
        long bytes = 0;
        for (int start = 0, b = 0; start < w.size(); start += w.batchRecords(), b++) {
            int end = Math.min(start + w.batchRecords(), w.size());
            MemoryRecordsBuilder builder = MemoryRecords.builder(ByteBuffer.allocate(capacities[b]),
                    RecordBatch.MAGIC_VALUE_V2, compression, TimestampType.CREATE_TIME, start);
            for (int i = start; i < end; i++) {
                builder.append(w.timestamps()[i], w.keys()[i], w.values()[i]);
            }
            MemoryRecords records = builder.build();
            bytes += records.sizeInBytes();
            if (out != null) {
                out.add(records.buffer());
            }
        }
        return bytes;
    }

    /** Every batch CRC-checked, every record's key and value copied out. Returns the record count. */
    private static long decode(ByteBuffer data, BufferSupplier supplier) {
        long count = 0;
        long sink = 0;
        for (MutableRecordBatch batch : MemoryRecords.readableRecords(data.duplicate()).batches()) {
            batch.ensureValid();
            try (CloseableIterator<Record> records = batch.streamingIterator(supplier)) {
                while (records.hasNext()) {
                    Record record = records.next();
                    byte[] key = record.hasKey() ? Utils.toArray(record.key()) : null;
                    byte[] value = record.hasValue() ? Utils.toArray(record.value()) : null;
                    sink += record.offset() + record.timestamp() + touch(key) + touch(value);
                    count++;
                }
            }
        }
        blackhole += sink;
        return count;
    }

    /** Reads the copy's last byte, so that the JIT cannot drop the copy. */
    private static long touch(byte[] copy) {
        return copy == null || copy.length == 0 ? 0 : copy.length + copy[copy.length - 1];
    }

    /** Decodes `data` as the timed decode does and compares every record with the input; null if equal. */
    private static String verify(Workload w, ByteBuffer data, BufferSupplier supplier) {
        try {
            return compare(w, data, supplier);
        } catch (RuntimeException e) {  // CorruptRecordException, InvalidRecordException, KafkaException
            return e.toString();
        }
    }

    private static String compare(Workload w, ByteBuffer data, BufferSupplier supplier) {
        int i = 0;
        for (MutableRecordBatch batch : MemoryRecords.readableRecords(data.duplicate()).batches()) {
            batch.ensureValid();
            try (CloseableIterator<Record> records = batch.streamingIterator(supplier)) {
                while (records.hasNext()) {
                    Record record = records.next();
                    if (i >= w.size()) {
                        return "more records than the " + w.size() + " written";
                    }
                    byte[] key = record.hasKey() ? Utils.toArray(record.key()) : null;
                    byte[] value = record.hasValue() ? Utils.toArray(record.value()) : null;
                    if (record.offset() != i || record.timestamp() != w.timestamps()[i]
                            || !Arrays.equals(key, w.keys()[i]) || !Arrays.equals(value, w.values()[i])) {
                        return "record " + i + " differs from the input (offset " + record.offset() + ")";
                    }
                    i++;
                }
            }
        }
        return i == w.size() ? null : "decoded " + i + " records, expected " + w.size();
    }

    private static String sameBytes(byte[] ours, byte[] klake) {
        int at = Arrays.mismatch(ours, klake);
        return at < 0 ? null : String.format(Locale.ROOT,
                "kafka-clients wrote %d bytes, klake %d; first difference at byte %d", ours.length, klake.length, at);
    }

    private static ByteBuffer concat(List<ByteBuffer> buffers, long size) {
        ByteBuffer all = ByteBuffer.allocate(Math.toIntExact(size));
        for (ByteBuffer b : buffers) {
            all.put(b.duplicate());
        }
        return all.flip();
    }

    private static String json(String s) {
        return s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ");
    }
}
