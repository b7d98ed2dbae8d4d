package omldm;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.runtime.state.StateSnapshotContext;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.BoundedOneInput;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;

/**
 * Groups the data records bound for each spoke into one batch per crossing into Python,
 * and, for the round-robin and stratified shardings, deals them to spokes.
 *
 * <p>Input: {@code Row(k INT, training BOOLEAN, v BYTES[, label STRING])}, one Kafka record
 * each (k: the spoke key drawn upstream in SQL; label: {@code JSON_VALUE(v, '$.label')}).
 * Output: {@code Row(k INT, batch BYTES)}, where batch is little-endian {@code int32 n},
 * {@code int32 length[n]}, {@code uint8 training[n]}, then the n records' bytes in arrival
 * order. A key's batch is sent when it holds {@code maxRecords} records or {@code maxBytes}
 * bytes, and every key's batch at the latest {@code delayMs} milliseconds (processing time)
 * after its first record, before each checkpoint barrier (so buffered records need no
 * state: exactly-once holds) and at the end of input. Records of one key leave in the
 * order they came.
 *
 * <p>Dealing ({@code sharding} "round-robin" or "stratified", papers/001 §III-A Fig. 4):
 * the key is not taken from the input but dealt: {@code spokeKeys[i]} for the next spoke
 * i of the record's stratum, round-robin within it; the k-th stratum seen starts at spoke
 * {@code k mod n}. Stratified: one stratum per label, plus one for forecasting records and
 * records without a label; round-robin: one stratum for all. A label that would open a
 * stratum once {@link #MAX_STRATA} exist, or has more than {@link #MAX_STRATUM_CHARS}
 * characters (code points), is dealt in the unlabelled stratum, so the deal stays bounded
 * on continuous labels (regression) or ids. This is what
 * {@code operators.sharding.StratifiedSharder} (Python, the in-process kernel) does. The
 * deal's position survives failures: it is operator state (union list state, each subtask
 * taking back its own entries).
 */
public class RecordBatcher extends AbstractStreamOperator<Row>
        implements OneInputStreamOperator<Row, Row>, BoundedOneInput, ProcessingTimeCallback {

    private static final long serialVersionUID = 1L;
    /** Strata the deal keeps apart at most ({@code operators.sharding.MAX_STRATA}). */
    static final int MAX_STRATA = 1000;
    /** Longest label with a stratum of its own ({@code operators.sharding.MAX_STRATUM_CHARS}). */
    static final int MAX_STRATUM_CHARS = 1000;

    private final long delayMs;
    private final int maxRecords;
    private final int maxBytes;
    /** "keyed" (the input's key), "round-robin" or "stratified". */
    private final String sharding;
    private final int[] spokeKeys;

    private transient Map<Integer, Batch> batches;
    private transient boolean timerSet;
    /** stratum ("L" + label, or "U" for unlabelled) -> next spoke index. */
    private transient Map<String, Integer> deal;
    private transient ListState<String> dealState;

    public RecordBatcher(long delayMs, int maxRecords, int maxBytes) {
        this(delayMs, maxRecords, maxBytes, "keyed", new int[0]);
    }

    public RecordBatcher(long delayMs, int maxRecords, int maxBytes, String sharding,
                         int[] spokeKeys) {
        if (delayMs < 1 || maxRecords < 1 || maxBytes < 1) {
            throw new IllegalArgumentException("delayMs, maxRecords and maxBytes must be >= 1");
        }
        if (!sharding.equals("keyed") && !sharding.equals("round-robin")
                && !sharding.equals("stratified")) {
            throw new IllegalArgumentException("sharding must be keyed, round-robin or stratified, got "
                    + sharding);
        }
        if (!sharding.equals("keyed") && spokeKeys.length < 1) {
            throw new IllegalArgumentException("dealing needs the spokes' keys");
        }
        this.delayMs = delayMs;
        this.maxRecords = maxRecords;
        this.maxBytes = maxBytes;
        this.sharding = sharding;
        this.spokeKeys = spokeKeys.clone();
    }

    private static final class Batch {
        final int key;
        final ByteArrayOutputStream body = new ByteArrayOutputStream(1 << 14);
        int[] lengths = new int[64];
        byte[] training = new byte[64];
        int n;

        Batch(int key) {
            this.key = key;
        }

        void add(boolean train, byte[] value) {
            if (n == lengths.length) {
                lengths = java.util.Arrays.copyOf(lengths, 2 * n);
                training = java.util.Arrays.copyOf(training, 2 * n);
            }
            lengths[n] = value.length;
            training[n] = (byte) (train ? 1 : 0);
            n++;
            body.write(value, 0, value.length);
        }

        byte[] drain() {
            ByteBuffer out = ByteBuffer.allocate(4 + 5 * n + body.size()).order(ByteOrder.LITTLE_ENDIAN);
            out.putInt(n);
            for (int i = 0; i < n; i++) {
                out.putInt(lengths[i]);
            }
            out.put(training, 0, n);
            out.put(body.toByteArray());
            n = 0;
            body.reset();
            return out.array();
        }
    }

    @Override
    public void initializeState(StateInitializationContext context) throws Exception {
        super.initializeState(context);
        deal = new HashMap<>();
        dealState = context.getOperatorStateStore().getUnionListState(
                new ListStateDescriptor<>("omldm-deal", Types.STRING));
        if (context.isRestored()) {
            String mine = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask() + "\t";
            for (String entry : dealState.get()) {  // "subtask \t next \t stratum"
                if (entry.startsWith(mine)) {
                    String rest = entry.substring(mine.length());
                    int tab = rest.indexOf('\t');
                    deal.put(rest.substring(tab + 1), Integer.parseInt(rest.substring(0, tab)));
                }
            }
        }
    }

    @Override
    public void snapshotState(StateSnapshotContext context) throws Exception {
        super.snapshotState(context);
        List<String> entries = new ArrayList<>(deal.size());
        int subtask = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
        for (Map.Entry<String, Integer> e : deal.entrySet()) {
            entries.add(subtask + "\t" + e.getValue() + "\t" + e.getKey());
        }
        dealState.update(entries);
    }

    @Override
    public void open() throws Exception {
        super.open();
        batches = new HashMap<>();
        timerSet = false;
    }

    /** The next spoke's key for a record of {@code stratum}. */
    private int dealKey(String stratum) {
        Integer next = deal.get(stratum);
        if (next == null && stratum.charAt(0) == 'L' && (deal.size() >= MAX_STRATA
                || stratum.codePointCount(1, stratum.length()) > MAX_STRATUM_CHARS)) {
            return dealKey("U");
        }
        int n = spokeKeys.length;
        int spoke = next == null ? deal.size() % n : next;
        deal.put(stratum, (spoke + 1) % n);
        return spokeKeys[spoke];
    }

    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        Row row = element.getValue();
        Boolean train = (Boolean) row.getField(1);
        byte[] value = (byte[]) row.getField(2);
        int key;
        if (sharding.equals("keyed")) {
            key = (Integer) row.getField(0);
        } else if (sharding.equals("round-robin")) {
            key = dealKey("U");
        } else {
            String label = (train == null || train) && row.getArity() > 3
                    ? (String) row.getField(3) : null;
            key = dealKey(label == null ? "U" : "L" + label);
        }
        if (value == null) {
            value = new byte[0];
        }
        Batch batch = batches.get(key);
        if (batch == null) {
            batch = new Batch(key);
            batches.put(key, batch);
        }
        batch.add(train == null || train, value);
        if (batch.n >= maxRecords || batch.body.size() >= maxBytes) {
            emit(batch);
        } else if (!timerSet) {
            timerSet = true;
            getProcessingTimeService().registerTimer(
                    getProcessingTimeService().getCurrentProcessingTime() + delayMs, this);
        }
    }

    private void emit(Batch batch) {
        output.collect(new StreamRecord<>(Row.of(batch.key, batch.drain())));
    }

    private void flushAll() {
        for (Batch batch : batches.values()) {
            if (batch.n > 0) {
                emit(batch);
            }
        }
    }

    @Override
    public void onProcessingTime(long time) throws Exception {
        timerSet = false;
        flushAll();
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        flushAll();
    }

    @Override
    public void endInput() throws Exception {
        flushAll();
    }

    @Override
    public void finish() throws Exception {
        flushAll();
        super.finish();
    }
}
